<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/** conversation.updated: subject or status changed (a PATCH, or a message reopening a snoozed one). */
final class ConversationUpdated extends Event
{
    /**
     * Each changed field with its value before the change, e.g.
     * ['status' => 'open'].
     *
     * @return array<string, mixed>
     */
    public function changes(): array
    {
        $changes = $this->data['changes'] ?? [];
        return is_array($changes) ? $changes : [];
    }
}
