package events

import (
	"strconv"
	"time"
)

// The consumer decodes every OrderRequested event and encodes an OrderConfirmed one per order;
// encoding/json's reflection was a third of its CPU. decodeFast and appendFast handle the
// events seckill writes, and hand everything else to encoding/json: they either give exactly
// encoding/json's answer or decline (differential and fuzz tests in codec_test.go).

// Field bits, for duplicate detection.
const (
	fType = 1 << iota
	fVersion
	fEventID
	fOccurredAt
	fOrderID
	fCampaignID
	fUserID
	fQuantity
	fDeadline
	fReason
)

// decodeFast parses b into e the way json.Unmarshal would, for a JSON object whose keys are
// the Event's exact names, each at most once, whose strings are printable ASCII without
// escapes and whose numbers are integers. It returns false, with e in any state, for anything
// else, including every input json.Unmarshal would reject.
func decodeFast(b []byte, e *Event) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	// One allocation for every string of the event: they are substrings of s.
	s := string(b)
	seen := 0
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return end(b, i+1)
	}
	for {
		j, ok := scanString(b, i)
		if !ok {
			return false
		}
		key := b[i+1 : j-1]
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		var bit int
		switch string(key) { // no allocation: the compiler compares the bytes
		case "type":
			bit = fType
		case "version":
			bit = fVersion
		case "event_id":
			bit = fEventID
		case "occurred_at":
			bit = fOccurredAt
		case "order_id":
			bit = fOrderID
		case "campaign_id":
			bit = fCampaignID
		case "user_id":
			bit = fUserID
		case "quantity":
			bit = fQuantity
		case "deadline":
			bit = fDeadline
		case "reason":
			bit = fReason
		default:
			return false // unknown, or a name json.Unmarshal matches case-insensitively
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case fVersion, fQuantity:
			n, j, ok := scanInt(b, i)
			if !ok {
				return false
			}
			if bit == fVersion {
				e.Version = n
			} else {
				e.Quantity = n
			}
			i = j
		case fOccurredAt, fDeadline:
			j, ok := scanString(b, i)
			if !ok {
				return false
			}
			t := &e.OccurredAt
			if bit == fDeadline {
				t = &e.Deadline
			}
			// What json.Unmarshal calls, with the same bytes.
			if t.UnmarshalJSON(b[i:j]) != nil {
				return false
			}
			i = j
		default:
			j, ok := scanString(b, i)
			if !ok {
				return false
			}
			v := s[i+1 : j-1]
			switch bit {
			case fType:
				e.Type = Type(v)
			case fEventID:
				e.EventID = v
			case fOrderID:
				e.OrderID = v
			case fCampaignID:
				e.CampaignID = v
			case fUserID:
				e.UserID = v
			case fReason:
				e.Reason = v
			}
			i = j
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return end(b, i+1)
		default:
			return false
		}
	}
}

// end reports whether only whitespace follows position i.
func end(b []byte, i int) bool { return skipSpace(b, i) == len(b) }

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the position after the closing quote of the string starting at b[i], if
// the string is made of printable ASCII other than the backslash: the strings that mean their
// bytes.
func scanString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return 0, false
		}
	}
	return 0, false
}

// scanInt parses the JSON integer at b[i] (-?(0|[1-9][0-9]*), no fraction or exponent) that
// fits an int without question.
func scanInt(b []byte, i int) (int, int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	start := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	digits := j - start
	if digits == 0 || digits > 15 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	n, err := strconv.Atoi(string(b[i:j]))
	return n, j, err == nil
}

// appendFast appends json.Marshal's encoding of e to dst, when every string of e is printable
// ASCII that json.Marshal writes as it is (no quote, backslash, or the HTML characters < > &
// it escapes) and its times are UTC within years 1 to 9999; otherwise it returns false.
func appendFast(dst []byte, e *Event) ([]byte, bool) {
	for _, s := range [...]string{string(e.Type), e.EventID, e.OrderID, e.CampaignID, e.UserID, e.Reason} {
		if !plain(s) {
			return dst, false
		}
	}
	if !plainTime(e.OccurredAt) || (!e.Deadline.IsZero() && !plainTime(e.Deadline)) {
		return dst, false
	}
	dst = append(dst, `{"type":"`...)
	dst = append(dst, e.Type...)
	dst = append(dst, `","version":`...)
	dst = strconv.AppendInt(dst, int64(e.Version), 10)
	dst = append(dst, `,"event_id":"`...)
	dst = append(dst, e.EventID...)
	dst = append(dst, `","occurred_at":"`...)
	dst = e.OccurredAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","order_id":"`...)
	dst = append(dst, e.OrderID...)
	dst = append(dst, `","campaign_id":"`...)
	dst = append(dst, e.CampaignID...)
	dst = append(dst, `","user_id":"`...)
	dst = append(dst, e.UserID...)
	dst = append(dst, `","quantity":`...)
	dst = strconv.AppendInt(dst, int64(e.Quantity), 10)
	if !e.Deadline.IsZero() {
		dst = append(dst, `,"deadline":"`...)
		dst = e.Deadline.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	if e.Reason != "" {
		dst = append(dst, `,"reason":"`...)
		dst = append(dst, e.Reason...)
		dst = append(dst, '"')
	}
	return append(dst, '}'), true
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// plainTime reports whether json.Marshal writes t as its RFC 3339 format with nanoseconds:
// always for UTC times of years 1 to 9999 (other zones and years have edge cases it refuses).
func plainTime(t time.Time) bool {
	if y := t.Year(); y < 1 || y > 9999 {
		return false
	}
	_, off := t.Zone()
	return off == 0 && t.Location() == time.UTC
}
