package main

import (
	"net/http"
	"time"
)

// newHTTPServer is the http.Server every chio HTTP surface is served by.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
}
