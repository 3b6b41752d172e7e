<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * A string that never shows itself: not in var_dump, print_r, var_export,
 * json_encode, serialize, a string cast or an exception trace. The value is
 * kept outside the object, so that no dump of its properties can reach it;
 * reveal() returns it.
 */
final class Secret implements \JsonSerializable
{
    /** @var \WeakMap<Secret, string>|null */
    private static ?\WeakMap $values = null;

    public function __construct(#[\SensitiveParameter] string $value)
    {
        $values = self::values();
        $values[$this] = $value;
    }

    public function reveal(): string
    {
        return self::values()[$this];
    }

    public function isEmpty(): bool
    {
        return $this->reveal() === '';
    }

    public function __toString(): string
    {
        return '[redacted]';
    }

    /** @return array<string, string> */
    public function __debugInfo(): array
    {
        return ['value' => '[redacted]'];
    }

    public function jsonSerialize(): string
    {
        return '[redacted]';
    }

    public function __clone()
    {
        throw new \LogicException('a Secret cannot be cloned');
    }

    /** @return array<never> */
    public function __serialize(): array
    {
        throw new \LogicException('a Secret cannot be serialized');
    }

    /** @param array<mixed> $data */
    public function __unserialize(array $data): void
    {
        throw new \LogicException('a Secret cannot be unserialized');
    }

    /** @return \WeakMap<Secret, string> */
    private static function values(): \WeakMap
    {
        return self::$values ??= new \WeakMap();
    }
}
