<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/**
 * message.created: message() was posted; $conversation is the
 * conversation after it.
 *
 * @phpstan-import-type Message from \Acme\Platform\Client
 */
final class MessageCreated extends Event
{
    /** @return array<string, mixed> the message posted (Message) */
    public function message(): array
    {
        $message = $this->data['message'] ?? [];
        return is_array($message) ? $message : [];
    }
}
