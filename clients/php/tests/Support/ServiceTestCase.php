<?php

declare(strict_types=1);

namespace Acme\Platform\Tests\Support;

use Acme\Platform\ApiError;
use PHPUnit\Framework\TestCase;

/**
 * A test against the real services that captures the library's log lines
 * (give $this->logger to a client) and checks after every test that none
 * of them holds a secret of the suite.
 */
abstract class ServiceTestCase extends TestCase
{
    /** @var list<array{0: string, 1: string}> level and message */
    protected array $logs = [];
    /** @var list<string> more secrets that no log line may contain */
    protected array $extraSecrets = [];
    /** @var \Closure(string, string, array<string, mixed>): void */
    protected \Closure $logger;

    protected function setUp(): void
    {
        $this->logs = [];
        $this->extraSecrets = [];
        $this->logger = function (string $level, string $message, array $context): void {
            $this->logs[] = [$level, $message . ($context !== [] ? ' ' . json_encode($context) : '')];
        };
    }

    protected function tearDown(): void
    {
        $secrets = $this->extraSecrets;
        foreach (['PASSWORD', 'OTHER_PASSWORD', 'LOCKOUT_PASSWORD', 'CLIENT_SECRET'] as $name) {
            $secrets[] = (string) getenv('ACME_TEST_' . $name);
        }
        foreach ($this->logs as [, $line]) {
            foreach ($secrets as $secret) {
                if ($secret !== '') {
                    $this->assertStringNotContainsString($secret, $line, 'a secret appears in a log line');
                }
            }
        }
    }

    /** How many log lines contain $text. */
    protected function logCount(string $text): int
    {
        return count(array_filter($this->logs, static fn (array $l): bool => str_contains($l[1], $text)));
    }

    /** Runs $fn, which must throw an ApiError; returns it. */
    protected static function apiError(callable $fn): ApiError
    {
        try {
            $fn();
        } catch (ApiError $e) {
            return $e;
        }
        self::fail('no ApiError');
    }
}
