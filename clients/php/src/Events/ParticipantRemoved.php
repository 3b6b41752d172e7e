<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/** conversation.participant_removed: userId() was removed (and sees its own removal). */
final class ParticipantRemoved extends ParticipantEvent
{
}
