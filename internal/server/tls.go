package server

import (
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fastlimit/fastlimit/internal/edge/certs"
	"github.com/fastlimit/fastlimit/internal/settings"
)

// The reference's variables of the TLS settings, which errors name.
const (
	envUseTLS    = "GRPC_SERVER_USE_TLS"
	envTLSCert   = "GRPC_SERVER_TLS_CERT"
	envTLSKey    = "GRPC_SERVER_TLS_KEY"
	envClientCA  = "GRPC_CLIENT_TLS_CACERT"
	envClientSAN = "GRPC_CLIENT_TLS_SAN"
)

// grpcTLS returns the certificate reloader and the gRPC server option
// that serve TLS, or none when TLS is off; refused is called for each
// rotation refused. Errors name the variable at fault.
func grpcTLS(o settings.TLS, refused func(), log *zap.Logger) (*certs.Reloader, []grpc.ServerOption, error) {
	if !o.Enabled {
		if o.Cert != "" || o.Key != "" || o.ClientCA != "" || o.ClientSAN != "" {
			log.Warn("gRPC TLS files are set but " + envUseTLS + " is not true: gRPC serves plaintext")
		}
		return nil, nil, nil
	}
	switch {
	case o.Cert == "":
		return nil, nil, fmt.Errorf("%s: required when %s is true", envTLSCert, envUseTLS)
	case o.Key == "":
		return nil, nil, fmt.Errorf("%s: required when %s is true", envTLSKey, envUseTLS)
	case o.ClientSAN != "" && o.ClientCA == "":
		return nil, nil, fmt.Errorf("%s: needs %s (without client certificates there is no SAN to check)", envClientSAN, envClientCA)
	}
	r, err := certs.New(certs.Options{
		Cert:       certs.File{Name: envTLSCert, Path: o.Cert},
		Key:        certs.File{Name: envTLSKey, Path: o.Key},
		ClientCA:   certs.File{Name: envClientCA, Path: o.ClientCA},
		ClientSAN:  o.ClientSAN,
		NextProtos: []string{"h2"},
		OnRefused:  func(error) { refused() },
	}, log)
	if err != nil {
		return nil, nil, err
	}
	leaf := r.Leaf()
	log.Info("gRPC serves TLS", zap.Bool("client_certificates", o.ClientCA != ""), zap.String("client_san", o.ClientSAN),
		zap.String("subject", leaf.Subject.String()), zap.Time("not_after", leaf.NotAfter))
	return r, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}, nil
}
