<?php

declare(strict_types=1);

namespace Acme\Platform\Internal;

use Acme\Platform\Secret;
use Acme\Platform\TransportError;

/**
 * Sends requests with ext-curl, reusing one handle (and so its
 * connections), following no redirect: following one would send the bearer
 * token, or a password, wherever the Location points.
 *
 * @internal
 */
final class CurlTransport
{
    /** The largest response body read; a larger successful body is an error. */
    public const MAX_BODY_BYTES = 4 << 20;

    private ?\CurlHandle $handle = null;

    public function __construct(private readonly float $timeout)
    {
    }

    /**
     * @param array<string, string> $headers
     * @param Secret|null           $authorization the value of the Authorization header
     */
    public function send(
        string $method,
        string $url,
        array $headers,
        #[\SensitiveParameter] string|Secret|null $body,
        ?Secret $authorization,
    ): Response {
        $path = (string) (parse_url($url, PHP_URL_PATH) ?: '/');
        $handle = $this->handle ??= curl_init();
        curl_reset($handle);
        $lines = [];
        foreach ($headers as $name => $value) {
            $lines[] = $name . ': ' . $value;
        }
        if ($authorization !== null) {
            $lines[] = 'Authorization: ' . $authorization->reveal();
        }
        $lines[] = 'Expect:'; // no "100-continue" round trip
        $received = [];
        $data = '';
        $tooLarge = false;
        curl_setopt_array($handle, [
            CURLOPT_URL => $url,
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_HTTPHEADER => $lines,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_TIMEOUT_MS => (int) ($this->timeout * 1000),
            CURLOPT_CONNECTTIMEOUT_MS => (int) (min($this->timeout, 10.0) * 1000),
            CURLOPT_HEADERFUNCTION => static function ($h, string $line) use (&$received): int {
                if (preg_match('/^HTTP\/\S+\s+\d{3}/', $line) === 1) {
                    $received = []; // a new response (after a 1xx)
                } elseif (str_contains($line, ':')) {
                    [$name, $value] = explode(':', $line, 2);
                    $received[strtolower(trim($name))][] = trim($value);
                }
                return strlen($line);
            },
            CURLOPT_WRITEFUNCTION => static function ($h, string $chunk) use (&$data, &$tooLarge): int {
                if (strlen($data) + strlen($chunk) > self::MAX_BODY_BYTES) {
                    $tooLarge = true;
                    return 0; // aborts the transfer
                }
                $data .= $chunk;
                return strlen($chunk);
            },
        ]);
        if ($body !== null) {
            curl_setopt($handle, CURLOPT_POSTFIELDS, $body instanceof Secret ? $body->reveal() : $body);
        } elseif ($method === 'HEAD') {
            curl_setopt($handle, CURLOPT_NOBODY, true);
        }
        $ok = curl_exec($handle);
        $status = (int) curl_getinfo($handle, CURLINFO_RESPONSE_CODE);
        // Forget the headers and the body, which may hold secrets.
        curl_reset($handle);
        if ($ok === false) {
            $errno = curl_errno($handle);
            if ($tooLarge && $status >= 200 && $status < 300) {
                $reason = sprintf('response body exceeds %d bytes', self::MAX_BODY_BYTES);
                throw new TransportError($method, $path, $reason);
            }
            if (!$tooLarge || $status === 0) {
                throw new TransportError($method, $path, self::describe($errno));
            }
        }
        return new Response($status, $received, $data);
    }

    /** A cause without the URL. */
    public static function describe(int $errno): string
    {
        return match ($errno) {
            CURLE_COULDNT_CONNECT => 'connection refused',
            CURLE_OPERATION_TIMEDOUT => 'timed out',
            CURLE_GOT_NOTHING => 'connection closed without a response',
            CURLE_RECV_ERROR, CURLE_SEND_ERROR => 'connection reset',
            CURLE_COULDNT_RESOLVE_HOST => 'host not found',
            default => curl_strerror($errno) ?? ('curl error ' . $errno),
        };
    }

    public function __destruct()
    {
        if ($this->handle !== null) {
            curl_close($this->handle);
        }
    }
}
