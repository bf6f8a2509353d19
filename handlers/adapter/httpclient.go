package adapter

import (
	"net/http"
	"time"
)

// NewHTTPClient is the client a platform adapter makes its calls with by default: its own
// keep-alive pool (16 idle connections per host, closed after 90 s idle) and, when timeout is
// not 0, an overall bound on each call (0 for adapters whose long polls set their own deadlines).
func NewHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}}
}
