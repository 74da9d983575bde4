// Habits of the Go legacy clients (anachronistic/apns, timehop/apns), reproduced with Go's own
// crypto/tls and the standard library only (the project's own code, not theirs).
//
// Go's tls.Conn.Read returns a record's bytes *together with* io.EOF when a close_notify alert
// already waits behind them in what it read from the socket. Both libraries test err before
// they use n, so such bytes are dropped. These commands read the way they do and print one JSON
// object on standard output.
//
//	go run go_habits.go feedback HOST PORT CERT KEY CA DELAY_MS
//	    Waits DELAY_MS after the handshake, then reads the feedback list one Read(buf[:38]) per
//	    tuple until an error, as both libraries do: bytes that come with an error are dropped.
//	go run go_habits.go error-response HOST PORT CERT KEY CA FRAMES DELAY_MS
//	    Writes the file FRAMES, waits DELAY_MS, then makes one Read into 6 bytes, as timehop
//	    does after a write: the packet counts only when it came without an error.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

func dial(host, port, cert, key, ca string) *tls.Conn {
	pair, err := tls.LoadX509KeyPair(cert, key)
	check(err)
	pem, err := os.ReadFile(ca)
	check(err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		check(fmt.Errorf("no certificate in %s", ca))
	}
	conn, err := tls.Dial("tcp", host+":"+port, &tls.Config{
		Certificates: []tls.Certificate{pair},
		RootCAs:      roots,
		ServerName:   "localhost",
		MaxVersion:   tls.VersionTLS12,
	})
	check(err)
	check(conn.Handshake())
	return conn
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func milliseconds(text string) time.Duration {
	n, err := strconv.Atoi(text)
	check(err)
	return time.Duration(n) * time.Millisecond
}

type feedbackResult struct {
	Tuples int `json:"tuples"`
	// Reads that returned bytes and an error at once: the libraries drop those bytes.
	DroppedWithError int      `json:"dropped_with_error"`
	DroppedBytes     int      `json:"dropped_bytes"`
	ShortReads       int      `json:"short_reads"`
	Tokens           []string `json:"tokens"`
	Error            string   `json:"error"`
}

func feedback(host, port, cert, key, ca, delay string) {
	conn := dial(host, port, cert, key, ca)
	defer conn.Close()
	time.Sleep(milliseconds(delay))
	result := feedbackResult{Tokens: []string{}}
	buf := make([]byte, 38)
	for {
		n, err := conn.Read(buf[:38])
		if err != nil {
			if n > 0 {
				result.DroppedWithError++
				result.DroppedBytes += n
			}
			result.Error = err.Error()
			break
		}
		if n != 38 || binary.BigEndian.Uint16(buf[4:6]) != 32 {
			result.ShortReads++
			break // out of sync: what follows is garbage
		}
		result.Tuples++
		result.Tokens = append(result.Tokens, hex.EncodeToString(buf[6:38]))
	}
	check(json.NewEncoder(os.Stdout).Encode(result))
}

type errorResponseResult struct {
	Bytes  int    `json:"bytes"`
	Packet string `json:"packet"`
	Error  string `json:"error"`
	// The 6-byte packet came without an error: what timehop reports to its caller.
	Heard bool `json:"heard"`
}

func errorResponse(host, port, cert, key, ca, frames, delay string) {
	conn := dial(host, port, cert, key, ca)
	defer conn.Close()
	bytes, err := os.ReadFile(frames)
	check(err)
	_, err = conn.Write(bytes)
	check(err)
	time.Sleep(milliseconds(delay))
	buf := make([]byte, 6)
	n, err := conn.Read(buf)
	result := errorResponseResult{Bytes: n, Packet: hex.EncodeToString(buf[:n])}
	if err != nil {
		result.Error = err.Error()
	}
	result.Heard = n == 6 && err == nil
	check(json.NewEncoder(os.Stdout).Encode(result))
}

func main() {
	arguments := os.Args[1:]
	if len(arguments) == 7 && arguments[0] == "feedback" {
		feedback(arguments[1], arguments[2], arguments[3], arguments[4], arguments[5], arguments[6])
	} else if len(arguments) == 8 && arguments[0] == "error-response" {
		errorResponse(arguments[1], arguments[2], arguments[3], arguments[4], arguments[5], arguments[6], arguments[7])
	} else {
		fmt.Fprintln(os.Stderr, "usage: go_habits feedback HOST PORT CERT KEY CA DELAY_MS | error-response HOST PORT CERT KEY CA FRAMES DELAY_MS")
		os.Exit(2)
	}
}
