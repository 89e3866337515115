package main

import "flag"

// headerOptions configure what a response carries besides the decision.
type headerOptions struct{}

func addHeaderFlags(fs *flag.FlagSet, o *headerOptions) {}
