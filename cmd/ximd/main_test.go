package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemoFlagTakesNoRole(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "demo with a role", args: []string{"--demo", "worker"}, wantCode: 2, wantErr: "--demo runs one complete node"},
		{name: "help names the demo", args: []string{"--help"}, wantCode: 0, wantErr: "ximd --demo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(tt.args, func(string) string { return "" }, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Fatalf("run(%q) = %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
}
