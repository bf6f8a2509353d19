package profile

// GoCodes returns a copy of goCodes, the codes Load checks against errors.json, for the
// completeness test in errors_test.go.
func GoCodes() []string { return append([]string(nil), goCodes...) }
