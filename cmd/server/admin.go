package main

import "flag"

// adminOptions configure hot reload, metrics and the admin listener.
type adminOptions struct{}

func addAdminFlags(fs *flag.FlagSet, o *adminOptions) {}
