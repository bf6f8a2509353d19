package profile_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
)

// codeConstants parses this package's source and returns every exported Code* string constant.
func codeConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s is not a string literal", name.Name)
					}
					out[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}

// TestCodeConstantsInTable: every Code* constant is a row of errors.json and every row has a
// constant, so a code can neither be used without being documented nor documented unused; and
// goCodes, the list Load checks against the table, names exactly the Code* constants.
func TestCodeConstantsInTable(t *testing.T) {
	consts := codeConstants(t)
	if len(consts) < 26 {
		t.Fatalf("found only %d Code constants", len(consts))
	}
	values := map[string]bool{}
	for name, code := range consts {
		info, ok := profile.Lookup(code)
		if !ok {
			t.Errorf("%s = %q is not in errors.json", name, code)
			continue
		}
		if info.Code != code || info.Description == "" || info.HTTPStatus == 0 {
			t.Errorf("%s: incomplete row %+v", name, info)
		}
		values[code] = true
	}
	for _, info := range profile.Codes() {
		if !values[info.Code] {
			t.Errorf("errors.json code %s has no Code constant", info.Code)
		}
	}
	listed := map[string]bool{}
	for _, code := range profile.GoCodes() {
		if listed[code] {
			t.Errorf("goCodes lists %s twice", code)
		}
		listed[code] = true
		if !values[code] {
			t.Errorf("goCodes lists %s, which is no Code constant", code)
		}
	}
	for name, code := range consts {
		if !listed[code] {
			t.Errorf("%s = %q is missing from goCodes (errors.go), so Load does not check it", name, code)
		}
	}
}

func TestCodeTable(t *testing.T) {
	// The semantics other packages and xAgent rely on (edge-api §2, §4, §5.1, §6, P-ACK-6).
	tests := []struct {
		code      string
		retryable bool
		status    int
	}{
		{profile.CodeInvalidPacket, false, 400},
		{profile.CodeUnsupportedSchema, false, 400},
		{profile.CodeChannelNotOpen, false, 404},
		{profile.CodePacketTooLarge, false, 413},
		{profile.CodeMessageIDConflict, false, 409},
		{profile.CodeFileNotFound, false, 404},
		{profile.CodeDeltaSequenceGap, false, 409},
		{profile.CodeDeltaSequenceConflict, false, 409},
		{profile.CodeTargetRateLimited, true, 429},
		{profile.CodeTargetUnavailable, true, 503},
		{profile.CodeTargetAuthFailed, false, 502},
		{profile.CodeTargetDeliveryFailed, false, 502},
		{profile.CodeDeliveryOutcomeUnknown, false, 502},
		{profile.CodeInternal, true, 500},
		{profile.CodeUnavailable, true, 503},
		{profile.CodeUnauthorized, false, 401},
		{profile.CodeInvalidChannelID, false, 400},
		{profile.CodeInvalidDescriptor, false, 400},
		{profile.CodeProfileNotSupported, false, 422},
		{profile.CodeTargetTypeNotSupported, false, 422},
		{profile.CodeTargetConfigInvalid, false, 422},
		{profile.CodeUnknownAdapter, false, 422},
		{profile.CodeFileTooLarge, false, 413},
		{profile.CodeFileDownloadFailed, false, 422},
		{profile.CodeNotFound, false, 404},
		{profile.CodeMethodNotAllowed, false, 405},
		{profile.CodeBadRequest, false, 400},
		{profile.CodeToolNotSupported, false, 501},
		{profile.CodeInvalidArguments, false, 400},
		{profile.CodeInvocationIDConflict, false, 409},
		{profile.CodeExpired, false, 410},
		{profile.CodeRateLimited, true, 429},
		{profile.CodeInvalidBotID, false, 400},
		{profile.CodeBotNotFound, false, 404},
		{profile.CodePairingNotFound, false, 404},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			info, ok := profile.Lookup(tc.code)
			if !ok || info.Retryable != tc.retryable || info.HTTPStatus != tc.status {
				t.Fatalf("Lookup = %+v, %v; want retryable %v status %d", info, ok, tc.retryable, tc.status)
			}
			e := profile.Errorf(tc.code, "field %s: %d", "x", 1)
			if e.Code != tc.code || e.Retryable != tc.retryable || e.Message != "field x: 1" {
				t.Fatalf("Errorf = %+v", e)
			}
		})
	}
	if len(tests) != len(profile.Codes()) {
		t.Fatalf("table has %d codes, test knows %d", len(profile.Codes()), len(tests))
	}
}

func TestErrorf(t *testing.T) {
	e := profile.Errorf("no_such_code", "boom")
	if e.Code != profile.CodeInternal || !e.Retryable || !strings.Contains(e.Message, `unknown error code "no_such_code": boom`) {
		t.Fatalf("unknown code: %+v", e)
	}
	if _, ok := profile.Lookup("nope"); ok {
		t.Fatal("Lookup of an unknown code")
	}
	codes := profile.Codes()
	codes[0].Code = "mutated"
	if profile.Codes()[0].Code == "mutated" {
		t.Fatal("Codes must return a copy")
	}
}

func TestErrorMatching(t *testing.T) {
	base := profile.Errorf(profile.CodeFileNotFound, "file_ref f1 is unknown")
	if base.Error() != "file_not_found: file_ref f1 is unknown" {
		t.Fatalf("Error() = %q", base.Error())
	}
	if (&profile.Error{Code: "x"}).Error() != "x" {
		t.Fatal("Error() without message")
	}
	wrapped := fmt.Errorf("deliver m1: %w", base)
	var pe *profile.Error
	if !errors.As(wrapped, &pe) || pe != base {
		t.Fatal("errors.As")
	}
	if !errors.Is(wrapped, &profile.Error{Code: profile.CodeFileNotFound}) {
		t.Fatal("errors.Is by code")
	}
	if errors.Is(wrapped, &profile.Error{Code: profile.CodeInternal}) {
		t.Fatal("errors.Is with another code")
	}
	if profile.CodeOf(wrapped) != profile.CodeFileNotFound || profile.CodeOf(nil) != "" || profile.CodeOf(errors.New("x")) != profile.CodeInternal {
		t.Fatal("CodeOf")
	}
	if profile.AsError(nil) != nil || profile.AsError(wrapped) != base {
		t.Fatal("AsError")
	}
	if ae := profile.AsError(errors.New("secret dsn")); ae.Code != profile.CodeInternal || strings.Contains(ae.Message, "secret") {
		t.Fatalf("AsError must not leak the cause: %+v", ae)
	}
}

func TestAcks(t *testing.T) {
	tests := []struct {
		name string
		ack  profile.Ack
		want string
	}{
		{"profile-7 accepted", profile.Accepted("m1"), `{"message_id":"m1","status":"accepted"}`},
		{"P-ACK-4 duplicate", profile.Duplicate("m1"), `{"message_id":"m1","status":"duplicate"}`},
		{"P-ACK-5 rejected not retryable carries retryable false", profile.Rejected("m1", profile.Errorf(profile.CodeTargetDeliveryFailed, "refused")),
			`{"message_id":"m1","status":"rejected","code":"target_delivery_failed","message":"refused","retryable":false}`},
		{"P-ACK-6 rejected retryable", profile.Rejected("m1", profile.Errorf(profile.CodeTargetRateLimited, "")),
			`{"message_id":"m1","status":"rejected","code":"target_rate_limited","retryable":true}`},
		{"profile-7 rejected nil error", profile.Rejected("m1", nil),
			`{"message_id":"m1","status":"rejected","code":"internal_error","message":"internal error","retryable":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.ack)
			if err != nil || string(b) != tc.want {
				t.Fatalf("ack = %s, %v; want %s", b, err, tc.want)
			}
			// What we send is what we accept.
			if _, err := profile.Default().DecodeAck(b); err != nil {
				t.Fatalf("own ack does not validate: %v", err)
			}
		})
	}
	e := profile.Errorf(profile.CodeTargetUnavailable, "x")
	ack := profile.Rejected("m", e)
	e.Retryable = false
	if !*ack.Retryable {
		t.Fatal("Rejected must copy Retryable")
	}
}

func TestErrorPayloadOf(t *testing.T) {
	p := profile.ErrorPayloadOf(profile.Errorf(profile.CodeDeltaSequenceGap, "expected sequence 2, got 3"))
	b, _ := json.Marshal(p)
	if string(b) != `{"code":"delta_sequence_gap","message":"expected sequence 2, got 3","retryable":false}` {
		t.Fatalf("payload = %s", b)
	}
	if p := profile.ErrorPayloadOf(nil); p.Code != profile.CodeInternal || !p.Retryable {
		t.Fatalf("nil = %+v", p)
	}
}
