<?php

declare(strict_types=1);

namespace Acme\Platform;

use Acme\Platform\Events\Event;
use Acme\Platform\Internal\CurlStream;
use Acme\Platform\Internal\SseParser;

/**
 * The caller's live stream of events (GET /v1/events/stream, Server-Sent
 * Events). A foreach over it blocks until each event arrives, for as long
 * as the loop runs; when the connection ends (the bearer token expired, the
 * replica shut down) or drops, it connects again with a fresh token and
 * Last-Event-ID set to the last id received, so no event is lost or
 * repeated. Leaving the loop closes the connection (when the generator is
 * released).
 *
 * @implements \IteratorAggregate<int, Event>
 */
final class EventStream implements \IteratorAggregate
{
    private ?string $lastEventId = null;
    private int $connections = 0;

    /**
     * @param \Closure(?string): CurlStream $open opens one connection, after the last event id when given
     */
    public function __construct(
        private readonly \Closure $open,
        private readonly int $maxRetries,
        private readonly float $maxRetryWait,
    ) {
    }

    /** The id of the last event received, null before the first. */
    public function lastEventId(): ?string
    {
        return $this->lastEventId;
    }

    /** The sequence of the last event received, to store and resume from ($after). */
    public function position(): ?int
    {
        $id = $this->lastEventId;
        return $id !== null && ctype_digit($id) ? (int) $id : null;
    }

    /** How many connections the stream has opened. */
    public function connections(): int
    {
        return $this->connections;
    }

    /** @return \Generator<int, Event> */
    public function getIterator(): \Generator
    {
        $silent = 0; // connections in a row that ended without sending anything
        $retryMs = null;
        while (true) {
            $stream = ($this->open)($this->lastEventId);
            $this->connections++;
            $dropped = null;
            $heard = false;
            try {
                $type = strtolower(trim(explode(';', $stream->headers()['content-type'][0] ?? '', 2)[0]));
                if ($type !== 'text/event-stream') {
                    throw new ClientException(
                        'acme/platform: GET /v1/events/stream: want text/event-stream, got ' . ($type ?: 'nothing')
                    );
                }
                $parser = new SseParser($this->lastEventId ?? '');
                while (true) {
                    try {
                        $chunk = $stream->read();
                    } catch (TransportError $e) {
                        $dropped = $e;
                        break;
                    }
                    if ($chunk === null) {
                        break;
                    }
                    $heard = true;
                    foreach ($parser->push($chunk) as $message) {
                        $event = self::parse($message['data']);
                        $this->lastEventId = $message['id'];
                        yield $event;
                    }
                    if ($parser->lastEventId !== '') {
                        $this->lastEventId = $parser->lastEventId;
                    }
                    $retryMs = $parser->retry ?? $retryMs;
                }
            } finally {
                $stream->close();
            }
            $silent = $heard ? 0 : $silent + 1;
            if ($silent > $this->maxRetries) {
                throw $dropped ?? new TransportError(
                    'GET',
                    '/v1/events/stream',
                    "the stream ended $silent times in a row without sending anything",
                );
            }
            $wait = $silent === 0 ? ($retryMs ?? 0) / 1000 : 0.25 * 2 ** ($silent - 1);
            usleep((int) (min($wait, $this->maxRetryWait) * 1e6));
        }
    }

    private static function parse(string $data): Event
    {
        try {
            $event = json_decode($data, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            throw new ClientException('acme/platform: the event stream sent data that is not JSON');
        }
        return Event::fromArray($event);
    }
}
