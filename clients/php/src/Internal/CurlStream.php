<?php

declare(strict_types=1);

namespace Acme\Platform\Internal;

use Acme\Platform\Secret;
use Acme\Platform\TransportError;

/**
 * One GET whose answer is read as it arrives (a Server-Sent Events
 * stream), with ext-curl's multi interface: a write callback collects what
 * arrives, and read() hands it out, waiting for more only when asked. No
 * redirect is followed.
 *
 * @internal
 */
final class CurlStream
{
    /** Seconds a stream may stay silent before it counts as dropped: the service sends a comment every 15 s. */
    public const IDLE_TIMEOUT = 60;

    private \CurlMultiHandle $multi;
    private \CurlHandle $handle;
    private string $buffer = '';
    /** @var array<string, list<string>> */
    private array $headers = [];
    private bool $headersDone = false;
    private bool $done = false;
    private int $result = CURLE_OK;

    /**
     * Sends the request and waits for the answer's status and headers.
     *
     * @param array<string, string> $headers
     */
    public function __construct(
        private readonly string $url,
        array $headers,
        Secret $authorization,
        float $connectTimeout,
    ) {
        $lines = [];
        foreach ($headers as $name => $value) {
            $lines[] = $name . ': ' . $value;
        }
        $lines[] = 'Authorization: ' . $authorization->reveal();
        $this->handle = curl_init();
        curl_setopt_array($this->handle, [
            CURLOPT_URL => $url,
            CURLOPT_HTTPGET => true,
            CURLOPT_HTTPHEADER => $lines,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_CONNECTTIMEOUT_MS => (int) (min($connectTimeout, 10.0) * 1000),
            // Less than a byte a second for IDLE_TIMEOUT seconds: dropped.
            CURLOPT_LOW_SPEED_LIMIT => 1,
            CURLOPT_LOW_SPEED_TIME => self::IDLE_TIMEOUT,
            CURLOPT_HEADERFUNCTION => function ($h, string $line): int {
                if (preg_match('/^HTTP\/\S+\s+\d{3}/', $line) === 1) {
                    $this->headers = []; // a new response (after a 1xx)
                } elseif (trim($line) === '') {
                    $this->headersDone = true;
                } elseif (str_contains($line, ':')) {
                    [$name, $value] = explode(':', $line, 2);
                    $this->headers[strtolower(trim($name))][] = trim($value);
                }
                return strlen($line);
            },
            CURLOPT_WRITEFUNCTION => function ($h, string $chunk): int {
                $this->buffer .= $chunk;
                return strlen($chunk);
            },
        ]);
        $this->multi = curl_multi_init();
        curl_multi_add_handle($this->multi, $this->handle);
        while (!$this->headersDone && !$this->done) {
            $this->pump();
        }
        if (!$this->headersDone) {
            $this->close();
            throw new TransportError('GET', $this->path(), CurlTransport::describe($this->result));
        }
    }

    /** The status of the answer. */
    public function status(): int
    {
        return (int) curl_getinfo($this->handle, CURLINFO_RESPONSE_CODE);
    }

    /** @return array<string, list<string>> the header fields by lower-case name */
    public function headers(): array
    {
        return $this->headers;
    }

    /**
     * The next part of the body, waiting for it; null at its end. A
     * connection that broke throws TransportError.
     */
    public function read(): ?string
    {
        while ($this->buffer === '' && !$this->done) {
            $this->pump();
        }
        if ($this->buffer !== '') {
            $chunk = $this->buffer;
            $this->buffer = '';
            return $chunk;
        }
        if ($this->result !== CURLE_OK) {
            throw new TransportError('GET', $this->path(), CurlTransport::describe($this->result));
        }
        return null;
    }

    /** The whole answer (an error's problem body), then closes the stream. */
    public function response(): Response
    {
        $body = '';
        try {
            while (($chunk = $this->read()) !== null && strlen($body) < CurlTransport::MAX_BODY_BYTES) {
                $body .= $chunk;
            }
        } catch (TransportError) {
            // The problem body as far as it came.
        }
        $response = new Response($this->status(), $this->headers, $body);
        $this->close();
        return $response;
    }

    /** Lets curl move the transfer on, waiting up to a second for the socket. */
    private function pump(): void
    {
        do {
            $status = curl_multi_exec($this->multi, $running);
        } while ($status === CURLM_CALL_MULTI_PERFORM);
        while (($info = curl_multi_info_read($this->multi)) !== false) {
            if ($info['handle'] === $this->handle) {
                $this->done = true;
                $this->result = $info['result'];
            }
        }
        if (!$this->done && $running === 0) {
            $this->done = true; // finished without a message: nothing more will come
        }
        if (!$this->done && $this->buffer === '') {
            if (curl_multi_select($this->multi, 1.0) === -1) {
                usleep(10_000);
            }
        }
    }

    private function path(): string
    {
        return (string) (parse_url($this->url, PHP_URL_PATH) ?: '/');
    }

    /** Ends the transfer and closes the connection. */
    public function close(): void
    {
        if (isset($this->multi)) {
            curl_multi_remove_handle($this->multi, $this->handle);
            curl_multi_close($this->multi);
            curl_close($this->handle);
            unset($this->multi);
        }
    }

    public function __destruct()
    {
        $this->close();
    }
}
