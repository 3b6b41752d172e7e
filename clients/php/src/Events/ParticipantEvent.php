<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/** A participant change: conversation.participant_added or conversation.participant_removed. */
abstract class ParticipantEvent extends Event
{
    /** The user added or removed. */
    public function userId(): string
    {
        $userId = $this->data['userId'] ?? '';
        return is_string($userId) ? $userId : '';
    }
}
