<?php

declare(strict_types=1);

namespace Acme\Platform;

use Acme\Platform\Events\Event;

/** One page of the event feed. */
final class EventPage
{
    /**
     * @param list<Event> $items    the events visible to the caller, oldest first
     * @param string|null $nextUrl  the absolute URL of the next page (Link: rel="next")
     * @param int|null    $position where to continue from: the after of $nextUrl, the highest sequence the
     *                              service examined for the caller, which may be past the last item (events
     *                              the caller may not see, or filtered out by types)
     */
    public function __construct(
        public readonly array $items,
        public readonly ?string $nextUrl,
        public readonly ?int $position,
    ) {
    }
}
