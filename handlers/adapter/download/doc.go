// Package download fetches the files a target system points to in its user input (edge-api
// §7.1: `POST /v1/targets/webhook/{channel}/messages` with files[].url), so that ximd can store
// them and hand them to xAgent. The URLs come from outside: nothing here may let one reach an
// internal service, hold a worker for long or exhaust memory.
//
// # What is downloaded
//
// Only absolute http and https URLs, without user information ("https://user:pass@host/" is
// refused). Any other scheme (file:, ftp:, data:, gopher:, ...) is refused without a connection.
//
// Only from allowed hosts: the channel's [Allowed] list, which is the target's own host plus the
// hosts the channel's config lists. The host is checked before connecting, on the URL alone
// (names are not resolved), and again for every redirect target before it is requested. An entry
// without a port allows every port of that host, so name the port to allow only one. Build the
// list with the target URL's Host (url.URL.Host: "127.0.0.1:9999" keeps its port, so a webhook
// target on a loopback port does not open the host's other loopback services) and add only hosts
// that serve files; an entry "*.example.com" allows every subdomain of example.com but not
// example.com itself. Since an allowed name is trusted with whatever address DNS gives it, list
// only names the operator controls or trusts.
//
// # Redirects
//
// At most MaxRedirects (default 3) are followed; one more fails, and so does a loop. A redirect
// to a host not allowed, to another scheme or from https to http is refused before it is
// requested.
//
// # Caps
//
//   - Size: at most MaxBytes (XIM_MAX_FILE_BYTES, default 64 MiB) body bytes. A Content-Length
//     above it fails before the body is read; without one (chunked, or close-delimited) or with a
//     wrong one, reading stops one byte past the cap. Both are file_too_large. The body is
//     streamed to a sink (the object store), never held in memory.
//   - Time: Timeout (XIM_FILE_DOWNLOAD_TIMEOUT, default 30s) bounds one file from the first
//     connection to its last byte, redirects included; a server that answers slowly or
//     trickles its body fails at that bound.
//   - Headers: the Fetcher's own client reads at most 64 KiB of response headers and does not
//     ask for compressed bodies, so the file is stored as served.
//
// # What is sent
//
// A plain GET with "User-Agent: ximd" and "Accept: */*": never an Authorization header,
// cookies (none are stored either) or a Referer, so neither ximd's credentials nor the URL of a
// previous hop (its query may hold a token) leave ximd.
//
// # Errors
//
// A failed download is a *profile.Error with code file_download_failed (HTTP 422: the webhook
// input is answered so and nothing is sent to xAgent), or file_too_large at the size cap. Any
// answer outside 2xx is a failure. The message names the URL as scheme://host/path (see
// [Redact]) and the reason, e.g. "download https://files.example.com/a.pdf: answered HTTP 404";
// never the query string, fragment or user information, which may hold a token. Callers add the
// file's index (files[1]) when they report it.
//
// # Result
//
// [Result] carries the normalized Content-Type, a filename (from Content-Disposition, else the
// URL path's last element, cleaned of directories and control characters) and the byte count.
package download
