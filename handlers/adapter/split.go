package adapter

import "strings"

// SplitText cuts text into consecutive parts of at most limit characters (runes) each, for a
// platform whose messages hold fewer than the final has (edge-api §7.2, Capabilities
// MaxTextLength). It cuts at a paragraph break if one lies in the second half of the room, else
// at a line break, else at a space, else mid-word. A part that ends inside a fenced code block
// (```) closes the fence and the next part reopens it with the same info string, so every part
// renders on its own. limit <= 0, or a text that fits, gives the text as the only part.
func SplitText(text string, limit int) []string {
	if limit <= 0 || runeLen(text) <= limit {
		return []string{text}
	}
	const fence = "```"
	if limit < 2*len(fence)+8 { // too small to close and reopen fences: plain cuts
		return plainCuts(text, limit)
	}
	var parts []string
	reopen := "" // the fence line the next part starts with ("" outside a fence)
	rest := text
	for rest != "" {
		room := limit - runeLen(reopen)
		if runeLen(rest) <= room {
			parts = append(parts, reopen+rest)
			break
		}
		// Leave room to close a fence this part might end inside.
		head := cutAt(rest, room-len(fence)-1)
		open, info := fenceState(reopen != "", reopen, head)
		part := reopen + strings.TrimRight(head, "\n")
		if open {
			part += "\n" + fence
		}
		parts = append(parts, part)
		rest = strings.TrimLeft(rest[len(head):], "\n")
		reopen = ""
		if open {
			if reopen = fence + info + "\n"; runeLen(reopen) > limit/4 { // an info string too long to repeat
				reopen = fence + "\n"
			}
		}
	}
	return parts
}

// cutAt returns the longest prefix of s of at most n runes ending at the best boundary, never
// inside a fence line (which would then not be a fence in either part).
func cutAt(s string, n int) string {
	end := byteOffset(s, n)
	window := s[:end]
	half := byteOffset(s, n/2)
	c := end
	for _, sep := range []string{"\n\n", "\n", " "} {
		if i := strings.LastIndex(window, sep); i >= half && i > 0 {
			c = i + len(sep)
			break
		}
	}
	ls := strings.LastIndex(s[:c], "\n") + 1 // start of the line the cut falls in
	if le := strings.IndexByte(s[ls:], '\n'); ls > 0 && strings.HasPrefix(s[ls:], "```") && (le < 0 || c < ls+le) && c > ls {
		c = ls
	}
	return s[:c]
}

// fenceState reports whether a code fence is open after head, given whether one was open before
// it (and the line that opened it), and the info string (language) of the open fence.
func fenceState(open bool, opener, head string) (bool, string) {
	info := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(opener), "```"))
	for _, line := range strings.Split(head, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "```") {
			continue
		}
		if open {
			open, info = false, ""
		} else {
			open, info = true, strings.TrimSpace(t[3:])
		}
	}
	return open, info
}

func plainCuts(text string, limit int) []string {
	var parts []string
	for text != "" {
		head := cutAt(text, limit)
		parts = append(parts, head)
		text = text[len(head):]
	}
	return parts
}

func runeLen(s string) int { return len([]rune(s)) }

// byteOffset is the byte offset of rune n of s (len(s) past its end).
func byteOffset(s string, n int) int {
	i := 0
	for off := range s {
		if i == n {
			return off
		}
		i++
	}
	return len(s)
}
