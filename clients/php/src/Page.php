<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * One page of a listing.
 *
 * @template T
 */
final class Page
{
    /**
     * @param list<T>     $items
     * @param string|null $nextUrl the absolute URL of the next page (from the Link header), null on the last page
     */
    public function __construct(
        public readonly array $items,
        public readonly ?string $nextUrl,
    ) {
    }
}
