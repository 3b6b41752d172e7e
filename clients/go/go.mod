module github.com/acme/platform/clients/go

go 1.26.0
