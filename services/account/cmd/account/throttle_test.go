package main

import (
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

func TestLoginThrottleConfiguration(t *testing.T) {
	t.Setenv("ACCOUNT_TRUSTED_PROXIES", " 10.0.0.0/8, ,192.0.2.10")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got := loginPolicy(cfg); got != account.DefaultThrottlePolicy {
		t.Errorf("default configuration gives policy %+v, want %+v", got, account.DefaultThrottlePolicy)
	}
	proxies, err := trustedProxies(cfg)
	if err != nil || len(proxies) != 2 || proxies[0].String() != "10.0.0.0/8" || proxies[1].String() != "192.0.2.10/32" {
		t.Errorf("trusted proxies = %v, %v", proxies, err)
	}

	t.Setenv("ACCOUNT_LOGIN_USER_MAX_FAILURES", "3")
	t.Setenv("ACCOUNT_LOGIN_WINDOW", "1h")
	if cfg, err = loadConfig(); err != nil {
		t.Fatal(err)
	}
	if p := loginPolicy(cfg); p.User.MaxFailures != 3 || p.IP.MaxFailures != 100 || p.User.Window != time.Hour || p.IP.Window != time.Hour {
		t.Errorf("policy %+v", p)
	}
}

func TestServeRefusesBadLoginThrottleConfiguration(t *testing.T) {
	for env, value := range map[string]string{
		"ACCOUNT_TRUSTED_PROXIES":         "10.0.0.0/8,proxy.internal",
		"ACCOUNT_LOGIN_WINDOW":            "0s",
		"ACCOUNT_LOGIN_LOCKOUT":           "-1m",
		"ACCOUNT_LOGIN_IP_MAX_FAILURES":   "-1",
		"ACCOUNT_LOGIN_USER_MAX_FAILURES": "many",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, value)
			name := strings.TrimPrefix(env, "ACCOUNT_")
			if _, err := runCmd(t, ""); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%q: err = %v, want one naming %s", env, value, err, name)
			}
		})
	}
}
