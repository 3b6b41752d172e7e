<?php

declare(strict_types=1);

namespace Acme\Platform\Internal;

/**
 * One HTTP answer.
 *
 * @internal
 */
final class Response
{
    /**
     * @param array<string, list<string>> $headers by lower-case name, every value in order
     */
    public function __construct(
        public readonly int $status,
        public readonly array $headers,
        public readonly string $body,
    ) {
    }

    /** The first value of a header field, '' when absent. */
    public function header(string $name): string
    {
        return $this->headers[strtolower($name)][0] ?? '';
    }

    /** @return list<string> every value of a header field */
    public function headerValues(string $name): array
    {
        return $this->headers[strtolower($name)] ?? [];
    }
}
