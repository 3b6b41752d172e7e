<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * A refused webhook delivery; $reason is 'headers', 'timestamp',
 * 'signature', 'payload' or 'secret'. Answer it with a 400.
 */
final class WebhookVerificationError extends \RuntimeException
{
    public function __construct(public readonly string $reason, string $message)
    {
        parent::__construct('webhook: ' . $message);
    }
}
