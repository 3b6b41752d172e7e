<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * The request got no HTTP answer: connection refused or reset, timeout. It
 * names the method and path, never a secret.
 */
final class TransportError extends ClientException
{
    public function __construct(
        public readonly string $method,
        public readonly string $path,
        public readonly string $reason,
    ) {
        parent::__construct(sprintf('acme/platform: %s %s: %s', $method, $path, $reason));
    }
}
