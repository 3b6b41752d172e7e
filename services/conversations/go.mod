module github.com/acme/platform/services/conversations

go 1.26.0

replace github.com/acme/platform/pkg => ../../pkg
