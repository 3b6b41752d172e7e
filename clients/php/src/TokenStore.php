<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * Where a client keeps its session. PHP usually serves each request in a
 * fresh process: a store backed by a cache (APCu, Redis, a file) lets every
 * request reuse the session instead of logging in again. A store holds
 * secrets: keep it private. When several processes share one store, the
 * store decides how they coordinate (e.g. a lock around load and save).
 */
interface TokenStore
{
    /** The stored session, null when there is none. */
    public function load(): ?Session;

    /** Stores the session; null forgets it (logout). */
    public function save(?Session $session): void;
}
