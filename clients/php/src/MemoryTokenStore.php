<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * The default TokenStore: one session in memory, for the life of the
 * process.
 */
final class MemoryTokenStore implements TokenStore
{
    public function __construct(private ?Session $session = null)
    {
    }

    public function load(): ?Session
    {
        return $this->session;
    }

    public function save(?Session $session): void
    {
        $this->session = $session;
    }
}
