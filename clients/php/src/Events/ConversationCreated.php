<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

/** conversation.created: $conversation as created. */
final class ConversationCreated extends Event
{
}
