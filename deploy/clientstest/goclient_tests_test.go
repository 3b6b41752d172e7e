package clientstest

// goTests are the Go client's tests, in the order they run.
func goTests(g *goSuite) []namedTest {
	return []namedTest{
		{"CreateCallsSendAFreshIdempotencyKey", g.testCreateCallsSendAFreshIdempotencyKey},
		{"TheCallersKeyMakesARepeatHarmless", g.testTheCallersKeyMakesARepeatHarmless},
		{"InvalidIdempotencyKeysAreNotSent", g.testInvalidIdempotencyKeysAreNotSent},
		{"TheClientsOwnRetryReusesTheKey", g.testTheClientsOwnRetryReusesTheKey},
		{"LoginSendsCredentialsAndUsesTheIDToken", g.testLoginSendsCredentialsAndUsesTheIDToken},
		{"LoginInvalidCredentials", g.testLoginInvalidCredentials},
		{"FirstCallLogsIn", g.testFirstCallLogsIn},
		{"RenewsBeforeExpiry", g.testRenewsBeforeExpiry},
		{"RenewsOn401AndRetriesOnce", g.testRenewsOn401AndRetriesOnce},
		{"RenewsOn401NotForever", g.testRenewsOn401NotForever},
		{"Refresh", g.testRefresh},
		{"ConcurrentCallsRenewOnce", g.testConcurrentCallsRenewOnce},
		{"RenewalOutlivesAnImpatientCaller", g.testRenewalOutlivesAnImpatientCaller},
		{"RefusedRefreshTokenIsNotOfferedAgain", g.testRefusedRefreshTokenIsNotOfferedAgain},
		{"TokenResponseWithoutIDToken", g.testTokenResponseWithoutIDToken},
	}
}
