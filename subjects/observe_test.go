package subjects

import (
	"errors"
	"testing"
)

func TestInChannel(t *testing.T) {
	for _, tc := range []struct {
		name, channel, want string
		wantErr             error
	}{
		{name: "plain", channel: "cch_1", want: "xim.in.cch_1.*"},
		{name: "dot", channel: "a.b", wantErr: ErrUnsafeToken},
		{name: "wildcard", channel: ">", wantErr: ErrUnsafeToken},
		{name: "empty", channel: "", wantErr: ErrUnsafeToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := InChannel(tc.channel)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("InChannel(%q) = %q, %v; want %q, %v", tc.channel, got, err, tc.want, tc.wantErr)
			}
			if err == nil {
				in, _ := In(tc.channel, "delta")
				if in[:len(got)-1] != got[:len(got)-1] {
					t.Fatalf("%s does not match %s", got, in)
				}
			}
		})
	}
}
