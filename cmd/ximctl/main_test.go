package main

import (
	"strings"
	"testing"
)

// Every command answers -h with its synopsis, a one-line description and its flags, exit 0; the
// shared flags are there with the same names; a usage error exits 2.
func TestCommands_HelpAndSharedFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{name: "send", flags: []string{"-http", "-token", "-channel"}},
		{name: "invoke", flags: []string{"-http", "-token", "-channel", "-tool", "-args", "-invocation-id"}},
		{name: "target", flags: []string{"-listen"}},
		{name: "tail", flags: []string{"-nats", "-channel", "-all"}},
		{name: "status", flags: []string{"-nats", "-http", "-token", "-channel", "-json"}},
		{name: "bench", flags: []string{"-no-progress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCommand(t, tc.name, "-h")
			if code != 0 {
				t.Fatalf("-h exited %d", code)
			}
			help := out + errOut
			lines := strings.Split(help, "\n")
			if len(lines) < 5 || !strings.HasPrefix(lines[0], "usage: ximctl "+tc.name) || lines[1] != "" || lines[2] == "" || lines[3] != "" || lines[4] != "flags:" {
				t.Fatalf("help is not usage, a one-line description and the flags:\n%s", help)
			}
			for _, f := range tc.flags {
				if !strings.Contains(help, "\n  "+f+" ") && !strings.Contains(help, "\n  "+f+"\n") {
					t.Fatalf("flag %s not in the help:\n%s", f, help)
				}
			}
			if code, _, _ := runCommand(t, tc.name, "-no-such-flag"); code != 2 {
				t.Fatalf("a bad flag exited %d, want 2", code)
			}
		})
	}
	if code, _, errOut := runCommand(t, "tail"); code != 2 || !strings.Contains(errOut, "-channel ID or -all") {
		t.Fatalf("tail without -channel: %d %s", code, errOut)
	}
}

func TestHTTPAddr(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "url", in: "http://127.0.0.1:8080", want: "127.0.0.1:8080"},
		{name: "trailing slash", in: "http://localhost:8081/", want: "localhost:8081"},
		{name: "host port", in: "127.0.0.1:9000", want: "127.0.0.1:9000"},
		{name: "https", in: "https://x:1", wantErr: true},
		{name: "path", in: "http://x:1/v1", wantErr: true},
		{name: "no port", in: "http://x", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpAddr(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("httpAddr(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}
