// Package prereqstest runs deploy/prereqs.sh, the step by which make test
// and make lint install their README sections' packages, against fake
// apt-get, dpkg-query, id, sudo and uname programs: it proves what the
// script would install, and when it refuses, without touching the system.
//
// It has no non-test code; run it with `go test ./prereqstest/` from deploy/.
package prereqstest
