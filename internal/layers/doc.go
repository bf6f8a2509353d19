// Package layers holds the test that keeps ximd's import arrows running one way (docs/design.md,
// "Packages"). Every package of the module is in one layer, and a package's non-test files
// import packages of its own layer or of the layers it is allowed, never one above:
//
//	cmd/...              -> internal, pipeline, handlers, adapter, spans, profile, subjects
//	internal/...         -> pipeline, handlers, adapter, spans, profile, subjects
//	pipeline, pipeline/... -> handlers, adapter, spans, profile, subjects
//	handlers             -> adapter, spans, profile, subjects
//	handlers/adapter/... -> spans, profile, subjects (never the stages, never pipeline)
//	handlers/spans       -> nothing of the module
//	profile, subjects    -> nothing of the module
//	test/...             -> anything (end-to-end suites consume every layer), imported by no
//	                        package's non-test files
//
// internal/ holds the operator tool's libraries (the conformance checks, the load tool, the
// in-process node they drive): ximctl (cmd) uses them and they drive the product (pipeline and
// below), so they sit between cmd and pipeline, and the product never imports them. Test files
// (_test.go, in the package or its external test package) are exempt: a test may import anything
// it drives. Packages of one layer may import each other (Go itself rejects a cycle); a package
// in no layer fails the test until it is given one.
package layers
