package main

import (
	"fmt"
	"net/netip"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// loginPolicy is the login throttle policy of the configuration: one
// window and lockout for both kinds of key, different limits.
func loginPolicy(cfg config) account.ThrottlePolicy {
	limit := func(maxFailures int) account.ThrottleLimit {
		return account.ThrottleLimit{MaxFailures: maxFailures, Window: cfg.LoginWindow, Lockout: cfg.LoginLockout, MaxLockout: cfg.LoginMaxLockout}
	}
	return account.ThrottlePolicy{User: limit(cfg.LoginUserMaxFailures), IP: limit(cfg.LoginIPMaxFailures)}
}

// trustedProxies parses ACCOUNT_TRUSTED_PROXIES.
func trustedProxies(cfg config) ([]netip.Prefix, error) {
	p, err := web.ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("configuration: ACCOUNT_TRUSTED_PROXIES: %w", err)
	}
	return p, nil
}

// validateLogin checks the login throttle settings and trusted proxies.
func (c config) validateLogin() error {
	if c.LoginUserMaxFailures < 0 || c.LoginIPMaxFailures < 0 || c.LoginMaxLockout < 0 {
		return fmt.Errorf("configuration: ACCOUNT_LOGIN_USER_MAX_FAILURES, ACCOUNT_LOGIN_IP_MAX_FAILURES and ACCOUNT_LOGIN_MAX_LOCKOUT must not be negative")
	}
	if err := loginPolicy(c).Validate(); err != nil {
		return fmt.Errorf("configuration: ACCOUNT_LOGIN_WINDOW and ACCOUNT_LOGIN_LOCKOUT must be positive while login throttling is on: %w", err)
	}
	_, err := trustedProxies(c)
	return err
}
