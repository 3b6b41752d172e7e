<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * One offending input of a validation_failed problem.
 */
final class FieldError
{
    /**
     * @param string $field  the JSON member or query parameter, e.g. "limit" or "participants[2]"
     * @param string $reason a short human-readable explanation
     */
    public function __construct(
        public readonly string $field,
        public readonly string $reason,
    ) {
    }
}
