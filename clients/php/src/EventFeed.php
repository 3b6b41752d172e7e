<?php

declare(strict_types=1);

namespace Acme\Platform;

use Acme\Platform\Events\Event;

/**
 * The caller's event feed from a position. Each foreach over it reads the
 * events after position(), page after page by the Link: rel="next" of
 * each, until the service has nothing more ready (a page that is not full,
 * or does not move the position on), and moves the position on as the loop
 * goes: store it after
 * handling an event and give it as $after next time, or iterate the same
 * feed again later.
 *
 * @implements \IteratorAggregate<int, Event>
 */
final class EventFeed implements \IteratorAggregate
{
    /**
     * @param int                          $pageSize the page size asked for: a page less full is the last ready
     * @param \Closure(?int): string       $firstUrl the URL of the first page after a position
     * @param \Closure(string): EventPage  $readPage
     */
    /** The page size of the feed when none is given. */
    public const DEFAULT_PAGE_SIZE = 100;

    public function __construct(
        private ?int $position,
        private readonly int $pageSize,
        private readonly \Closure $firstUrl,
        private readonly \Closure $readPage,
    ) {
    }

    /**
     * The position after the events handled so far: the sequence of the
     * last event the loop received or, once a page is done, the position
     * its next link names; null before anything was read without $after.
     */
    public function position(): ?int
    {
        return $this->position;
    }

    /** @return \Generator<int, Event> */
    public function getIterator(): \Generator
    {
        $url = ($this->firstUrl)($this->position);
        while (true) {
            $before = $this->position;
            $page = ($this->readPage)($url);
            foreach ($page->items as $event) {
                yield $event;
                $this->position = $event->sequence;
            }
            if ($page->position !== null) {
                $this->position = $page->position;
            }
            // A full page means more are ready now; anything less, that the
            // feed is read up to the newest event the caller may see.
            $full = count($page->items) >= $this->pageSize;
            if (!$full || $page->nextUrl === null || ($before !== null && $page->position === $before)) {
                return;
            }
            $url = $page->nextUrl;
        }
    }
}
