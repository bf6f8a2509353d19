package profile

import (
	"errors"
	"fmt"
)

// Protocol error codes. Each one is a row of the embedded errors.json (code, retryable,
// http_status, description); [Load] fails if one is missing there. The codes travel in
// `error` packets, in rejected `chat.message.ack` payloads and in HTTP error bodies, so
// they are stable: never rename one.
const (
	CodeInvalidPacket          = "invalid_packet"
	CodeUnsupportedSchema      = "unsupported_schema"
	CodeChannelNotOpen         = "channel_not_open"
	CodePacketTooLarge         = "packet_too_large"
	CodeMessageIDConflict      = "message_id_conflict"
	CodeFileNotFound           = "file_not_found"
	CodeDeltaSequenceGap       = "delta_sequence_gap"
	CodeDeltaSequenceConflict  = "delta_sequence_conflict"
	CodeTargetRateLimited      = "target_rate_limited"
	CodeTargetUnavailable      = "target_unavailable"
	CodeTargetAuthFailed       = "target_auth_failed"
	CodeTargetDeliveryFailed   = "target_delivery_failed"
	CodeDeliveryOutcomeUnknown = "delivery_outcome_unknown"
	CodeInternal               = "internal_error"
	CodeUnavailable            = "unavailable"
	CodeUnauthorized           = "unauthorized"
	CodeInvalidChannelID       = "invalid_channel_id"
	CodeInvalidDescriptor      = "invalid_descriptor"
	CodeProfileNotSupported    = "profile_not_supported"
	CodeTargetTypeNotSupported = "target_type_not_supported"
	CodeUnknownAdapter         = "unknown_adapter"
	CodeTargetConfigInvalid    = "target_config_invalid"
	CodeFileTooLarge           = "file_too_large"
	CodeFileDownloadFailed     = "file_download_failed"
	CodeNotFound               = "not_found"
	CodeMethodNotAllowed       = "method_not_allowed"
	CodeBadRequest             = "bad_request"
	CodeToolNotSupported       = "tool_not_supported"
	CodeInvalidArguments       = "invalid_arguments"
	CodeInvocationIDConflict   = "invocation_id_conflict"
	CodeInvalidBotID           = "invalid_bot_id"
	CodeBotNotFound            = "bot_not_found"
	CodePairingNotFound        = "pairing_not_found"
	CodeExpired                = "expired"
	CodeRateLimited            = "rate_limited"
)

// goCodes lists every Code* constant; Load checks each against errors.json. TestCodeConstantsInTable
// parses this package's source and fails if a Code* constant is missing here, or if a row of
// errors.json has no Code* constant.
var goCodes = []string{
	CodeInvalidPacket, CodeUnsupportedSchema, CodeChannelNotOpen, CodePacketTooLarge,
	CodeMessageIDConflict, CodeFileNotFound, CodeDeltaSequenceGap, CodeDeltaSequenceConflict,
	CodeTargetRateLimited, CodeTargetUnavailable, CodeTargetAuthFailed, CodeTargetDeliveryFailed,
	CodeDeliveryOutcomeUnknown, CodeInternal, CodeUnavailable, CodeUnauthorized,
	CodeInvalidChannelID, CodeInvalidDescriptor, CodeProfileNotSupported,
	CodeTargetTypeNotSupported, CodeUnknownAdapter, CodeTargetConfigInvalid, CodeFileTooLarge, CodeFileDownloadFailed,
	CodeNotFound, CodeMethodNotAllowed, CodeBadRequest, CodeToolNotSupported,
	CodeInvalidArguments, CodeRateLimited, CodeExpired, CodeInvocationIDConflict,
	CodeInvalidBotID, CodeBotNotFound, CodePairingNotFound,
}

// CodeInfo is one row of the error-code table (errors.json).
type CodeInfo struct {
	// Code is the stable wire code, e.g. "invalid_packet".
	Code string `json:"code"`
	// Retryable tells the sender whether the same request may succeed after a back-off (P-ACK-5).
	Retryable bool `json:"retryable"`
	// HTTPStatus is the status of an HTTP answer carrying this code.
	HTTPStatus int `json:"http_status"`
	// Description says when the code is used, citing the rules.
	Description string `json:"description"`
}

// Error is a protocol error: a stable code from the table, a short human-readable message naming
// the offending field or cause, and whether a retry may succeed. It is what validation returns
// and what rejection acks, `error` packets and HTTP error bodies are built from.
//
// Callers find it with errors.As; never match on Error(). errors.Is(err, &Error{Code: c}) is true
// when err's chain holds an *Error with code c (see [Error.Is]).
type Error struct {
	Code      string
	Message   string
	Retryable bool
}

// Error returns "code: message" (or just the code when there is no message).
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same Code; Message and Retryable are ignored,
// so errors.Is(err, &profile.Error{Code: profile.CodeFileNotFound}) tests for a code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && t.Code == e.Code
}

// Errorf returns an *Error with the given code, a message formatted with fmt.Sprintf, and
// Retryable taken from the code table. A code missing from the table is a programming error: the
// result then has code internal_error (and its retryable), with the unknown code in the message,
// so that only table codes ever reach the wire.
func Errorf(code, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	if info, ok := Lookup(code); ok {
		return &Error{Code: info.Code, Message: msg, Retryable: info.Retryable}
	}
	info, _ := Lookup(CodeInternal)
	return &Error{
		Code:      CodeInternal,
		Message:   fmt.Sprintf("unknown error code %q: %s", code, msg),
		Retryable: info.Retryable,
	}
}

// Lookup returns the table row of code.
func Lookup(code string) (CodeInfo, bool) {
	return Default().Lookup(code)
}

// Codes returns a copy of the whole code table, in the order of errors.json (for documentation
// generation and tests).
func Codes() []CodeInfo {
	return Default().Codes()
}

// Lookup returns the table row of code in c's error table.
func (c *Catalog) Lookup(code string) (CodeInfo, bool) {
	i, ok := c.codeIndex[code]
	if !ok {
		return CodeInfo{}, false
	}
	return c.codes[i], true
}

// Codes returns a copy of c's error table, in file order.
func (c *Catalog) Codes() []CodeInfo {
	return append([]CodeInfo(nil), c.codes...)
}

// AsError returns the first *Error in err's chain. Any other non-nil error becomes an
// internal_error whose message is "internal error" (the cause is not put on the wire; log it).
// A nil err gives nil.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) && pe != nil {
		return pe
	}
	return Errorf(CodeInternal, "internal error")
}

// CodeOf returns the protocol code of err: the code of the first *Error in its chain,
// internal_error for any other error, "" for nil.
func CodeOf(err error) string {
	if pe := AsError(err); pe != nil {
		return pe.Code
	}
	return ""
}

// invalidf is Errorf(CodeInvalidPacket, ...).
func invalidf(format string, args ...any) *Error {
	return Errorf(CodeInvalidPacket, format, args...)
}
