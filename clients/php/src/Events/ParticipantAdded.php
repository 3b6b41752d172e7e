<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/** conversation.participant_added: userId() was added. */
final class ParticipantAdded extends ParticipantEvent
{
}
