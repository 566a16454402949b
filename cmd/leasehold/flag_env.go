package main

import (
	"strings"

	"github.com/spf13/pflag"
)

// envPrefix starts the environment variable of every serve flag.
const envPrefix = "LEASEHOLD_"

// flagEnvNames are the variables of the flags whose variable is not
// LEASEHOLD_<FLAG IN UPPER SNAKE CASE>. serve's TLS files have SERVER_ in
// theirs: LEASEHOLD_TLS_* are a client's (the embedded relay dials with
// them).
var flagEnvNames = map[string]string{
	"tls-cert-file":      envServerTLSCert,
	"tls-key-file":       envServerTLSKey,
	"tls-client-ca-file": envServerTLSClientCA,
}

// flagEnv is the environment variable of the flag called name.
func flagEnv(name string) string {
	if v, ok := flagEnvNames[name]; ok {
		return v
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagEnvSkipped are flags without a variable: cobra's own.
func flagEnvSkipped(name string) bool { return name == "help" }

// documentFlagEnv appends " (env VAR)" to the usage of every flag in fs
// that does not name its variable yet. Call it once the flags are
// registered.
func documentFlagEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if flagEnvSkipped(f.Name) {
			return
		}
		if env := flagEnv(f.Name); !strings.Contains(f.Usage, env) {
			f.Usage += " (env " + env + ")"
		}
	})
}

// bindFlagEnv is the one binding of serve's flags to the environment: after
// parsing, every flag not given on the command line takes its variable's
// value when that is set and not empty (the command line wins). Values
// parse as on the command line, so booleans accept what strconv.ParseBool
// does (1, t, true, TRUE, 0, f, false…). A value that does not parse is a
// usage error naming the variable.
func bindFlagEnv(getenv func(string) string, fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || flagEnvSkipped(f.Name) {
			return
		}
		env := flagEnv(f.Name)
		v := getenv(env)
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("%s=%q: %v", env, v, serr)
		}
	})
	return err
}
