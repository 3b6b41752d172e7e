<?php

declare(strict_types=1);

namespace Acme\Platform\Tests\Support;

/**
 * A TCP proxy (tests/Support/drop_proxy.php, in a process of its own) in
 * front of the real conversations service: it forwards every request and,
 * for the first $drop requests of $method on a path starting with $prefix,
 * closes the connection instead of returning the service's answer, as a
 * network failure after the request was processed would. It fakes nothing
 * of the API: every answer that reaches the client is the service's own.
 */
final class DropFirstResponses
{
    public readonly string $url;
    /** @var resource */
    private $process;
    private string $logFile;

    public function __construct(string $upstream, string $method, string $prefix, int $drop)
    {
        $this->logFile = (string) tempnam(sys_get_temp_dir(), 'drop-proxy');
        $script = __DIR__ . '/drop_proxy.php';
        $command = [PHP_BINARY, $script, $upstream, $method, $prefix, (string) $drop, $this->logFile];
        $process = proc_open($command, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => STDERR], $pipes);
        if ($process === false) {
            throw new \RuntimeException('cannot start the proxy');
        }
        $this->process = $process;
        $line = fgets($pipes[1]);
        if ($line === false || !preg_match('/^listening (\S+)/', $line, $m)) {
            throw new \RuntimeException('the proxy did not start');
        }
        $this->url = 'http://' . $m[1];
    }

    /** @return list<array{method: string, target: string, idempotencyKey: string, dropped: bool}> */
    public function forwarded(): array
    {
        $lines = file($this->logFile, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) ?: [];
        return array_map(static fn (string $l): array => json_decode($l, true, 512, JSON_THROW_ON_ERROR), $lines);
    }

    public function close(): void
    {
        proc_terminate($this->process);
        proc_close($this->process);
        @unlink($this->logFile);
    }
}
