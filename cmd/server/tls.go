package main

import (
	"flag"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fastlimit/fastlimit/pkg/certs"
)

// Environment twins of the TLS flags: the reference's variables.
const (
	envUseTLS    = "GRPC_SERVER_USE_TLS"
	envTLSCert   = "GRPC_SERVER_TLS_CERT"
	envTLSKey    = "GRPC_SERVER_TLS_KEY"
	envClientCA  = "GRPC_CLIENT_TLS_CACERT"
	envClientSAN = "GRPC_CLIENT_TLS_SAN"
)

// tlsOptions secure the gRPC listener.
type tlsOptions struct {
	enabled   bool
	cert, key string
	clientCA  string // require and verify client certificates against it
	clientSAN string // a SAN that client certificates must carry
}

func addTLSFlags(fs *flag.FlagSet, o *tlsOptions) {
	fs.BoolVar(&o.enabled, "grpc-server-use-tls", false,
		"serve gRPC over TLS with --grpc-server-tls-cert and --grpc-server-tls-key (files re-read when they change)")
	fs.StringVar(&o.cert, "grpc-server-tls-cert", "", "gRPC TLS: PEM file of the server's certificate chain")
	fs.StringVar(&o.key, "grpc-server-tls-key", "", "gRPC TLS: PEM file of the server's private key")
	fs.StringVar(&o.clientCA, "grpc-client-tls-cacert", "",
		"gRPC TLS: PEM file of the CA certificates that client certificates must chain to; when set, clients without a valid certificate are refused (mTLS)")
	fs.StringVar(&o.clientSAN, "grpc-client-tls-san", "",
		"gRPC mTLS: a subject alternative name (DNS name, IP or URI) that client certificates must carry")
}

// grpcTLS returns the gRPC server option that serves TLS, or none when
// TLS is off. Errors name the variable at fault.
func grpcTLS(o tlsOptions, log *zap.Logger) ([]grpc.ServerOption, error) {
	if !o.enabled {
		if o.cert != "" || o.key != "" || o.clientCA != "" || o.clientSAN != "" {
			log.Warn("gRPC TLS files are set but " + envUseTLS + " is not true: gRPC serves plaintext")
		}
		return nil, nil
	}
	switch {
	case o.cert == "":
		return nil, fmt.Errorf("%s: required when %s is true", envTLSCert, envUseTLS)
	case o.key == "":
		return nil, fmt.Errorf("%s: required when %s is true", envTLSKey, envUseTLS)
	case o.clientSAN != "" && o.clientCA == "":
		return nil, fmt.Errorf("%s: needs %s (without client certificates there is no SAN to check)", envClientSAN, envClientCA)
	}
	r, err := certs.New(certs.Options{
		Cert:       certs.File{Name: envTLSCert, Path: o.cert},
		Key:        certs.File{Name: envTLSKey, Path: o.key},
		ClientCA:   certs.File{Name: envClientCA, Path: o.clientCA},
		ClientSAN:  o.clientSAN,
		NextProtos: []string{"h2"},
	}, log)
	if err != nil {
		return nil, err
	}
	leaf := r.Leaf()
	log.Info("gRPC serves TLS", zap.Bool("client_certificates", o.clientCA != ""), zap.String("client_san", o.clientSAN),
		zap.String("subject", leaf.Subject.String()), zap.Time("not_after", leaf.NotAfter))
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}, nil
}
