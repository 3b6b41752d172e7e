<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * The tokens of a logged-in client. Its tokens are Secret values, so that
 * dumping a session shows none of them.
 */
final class Session
{
    /**
     * @param Secret      $bearer       the id token of a user, the access token of a service client
     * @param Secret|null $refreshToken users only; single-use: each refresh brings a new one
     * @param float       $expiresAt    when the bearer expires, in seconds since the epoch
     * @param float       $lifetime     the lifetime of the bearer in seconds (expires_in)
     */
    public function __construct(
        public readonly Secret $bearer,
        public readonly ?Secret $refreshToken,
        public readonly float $expiresAt,
        public readonly float $lifetime,
    ) {
    }

    /** The largest margin before expiry at which a session is renewed. */
    public const MAX_RENEW_MARGIN = 60.0;

    /**
     * When the client renews this session: a tenth of its lifetime (at most
     * a minute) before it expires.
     */
    public function renewAt(): float
    {
        return $this->expiresAt - min(self::MAX_RENEW_MARGIN, $this->lifetime / 10);
    }

    public function withoutRefreshToken(): self
    {
        return new self($this->bearer, null, $this->expiresAt, $this->lifetime);
    }
}
