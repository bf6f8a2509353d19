package wecomtest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
)

// encrypt is what WeCom serves at a file's URL: AES-256-CBC with the base64 aeskey, IV the key's
// first 16 bytes, PKCS#7 padding to a multiple of 32 bytes.
func encrypt(data []byte, aesKey string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(aesKey)
	if err != nil {
		return nil, err
	}
	n := 32 - len(data)%32
	plain := append(append([]byte(nil), data...), bytes.Repeat([]byte{byte(n)}, n)...)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(plain))
	cipher.NewCBCEncrypter(block, key[:16]).CryptBlocks(out, plain)
	return out, nil
}
