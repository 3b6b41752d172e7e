<?php

declare(strict_types=1);

namespace Acme\Platform\Internal;

/**
 * An incremental parser of text/event-stream (HTML standard, 9.2.6): feed
 * it the stream as it arrives, in chunks of any size. Lines end with CRLF,
 * LF or CR (a CRLF split across chunks counts once); lines starting with
 * ":" are comments; a value loses one leading space; "retry:" with digits
 * only sets $retry (milliseconds); an id containing NUL is ignored; a block
 * without data dispatches nothing.
 *
 * @internal
 */
final class SseParser
{
    /** The reconnection time the server asked for, in milliseconds, if any. */
    public ?int $retry = null;
    private string $id;
    private string $line = '';
    private bool $skipLf = false;
    /** @var list<string> */
    private array $data = [];
    private string $event = '';

    public function __construct(public string $lastEventId = '')
    {
        $this->id = $lastEventId;
    }

    /**
     * Parses the next chunk; returns the messages it completes, each
     * ['id' => the last event ID after it, 'event' => its type ("message"
     * when the block named none), 'data' => its data lines joined by "\n"].
     *
     * @return list<array{id: string, event: string, data: string}>
     */
    public function push(string $chunk): array
    {
        $out = [];
        $start = 0;
        $length = strlen($chunk);
        if ($length === 0) {
            return [];
        }
        if ($this->skipLf && $chunk[0] === "\n") {
            $start = 1; // the LF of a CRLF whose CR ended the previous chunk's line
        }
        $this->skipLf = false;
        while ($start <= $length) {
            $end = strcspn($chunk, "\r\n", $start);
            if ($start + $end >= $length) {
                $this->line .= substr($chunk, $start);
                break;
            }
            $line = $this->line . substr($chunk, $start, $end);
            $this->line = '';
            $at = $start + $end;
            $start = $at + 1;
            if ($chunk[$at] === "\r") {
                if ($start < $length && $chunk[$start] === "\n") {
                    $start++;
                } elseif ($start === $length) {
                    $this->skipLf = true;
                }
            }
            $message = $this->process($line);
            if ($message !== null) {
                $out[] = $message;
            }
        }
        return $out;
    }

    /** @return array{id: string, event: string, data: string}|null */
    private function process(string $line): ?array
    {
        if ($line === '') {
            return $this->dispatch();
        }
        if ($line[0] === ':') {
            return null;
        }
        $colon = strpos($line, ':');
        $field = $colon === false ? $line : substr($line, 0, $colon);
        $value = $colon === false ? '' : substr($line, $colon + 1);
        if (str_starts_with($value, ' ')) {
            $value = substr($value, 1);
        }
        switch ($field) {
            case 'event':
                $this->event = $value;
                break;
            case 'data':
                $this->data[] = $value;
                break;
            case 'id':
                if (!str_contains($value, "\0")) {
                    $this->id = $value;
                }
                break;
            case 'retry':
                if ($value !== '' && ctype_digit($value)) {
                    $this->retry = (int) $value;
                }
                break;
        }
        return null;
    }

    /** @return array{id: string, event: string, data: string}|null */
    private function dispatch(): ?array
    {
        $this->lastEventId = $this->id;
        $data = $this->data;
        $event = $this->event !== '' ? $this->event : 'message';
        $this->data = [];
        $this->event = '';
        if ($data === []) {
            return null;
        }
        return ['id' => $this->lastEventId, 'event' => $event, 'data' => implode("\n", $data)];
    }
}
