<?php

declare(strict_types=1);

namespace Acme\Platform\Tests\Support;

/**
 * A proxy in front of the real service at $upstream: it forwards every
 * request and, for the first $drop requests of $method on a path starting
 * with $prefix, closes the connection instead of returning the service's
 * answer, as a network failure after the request was processed would. It
 * fakes nothing of the API: every answer that reaches the client is the
 * service's own. The proxy is deploy/clientstest's fault proxy, shared by
 * the client suites; this opens one through its control endpoint
 * (ACME_TEST_FAULT_PROXY_URL).
 */
final class DropFirstResponses
{
    public readonly string $url;
    private string $control;
    private string $id;

    /**
     * With $cutAfterEvents, the matching answers are streamed and the first
     * $drop of them cut after that many events instead. With
     * $refuseTokens, that many matching requests from the one numbered
     * $refuseFrom (0: the first) reach the service with their bearer token
     * broken: the service answers 401 invalid_token.
     */
    public function __construct(
        string $upstream,
        string $method,
        string $prefix,
        int $drop,
        int $cutAfterEvents = 0,
        int $refuseTokens = 0,
        int $refuseFrom = 0,
    ) {
        $this->control = Env::get('FAULT_PROXY_URL');
        [$status, $body] = self::call('POST', $this->control . '/proxies', json_encode(
            [
                'upstream' => $upstream,
                'method' => $method,
                'pathPrefix' => $prefix,
                'drop' => $drop,
                'cutAfterEvents' => $cutAfterEvents,
                'refuseTokens' => $refuseTokens,
                'refuseFrom' => $refuseFrom,
            ],
            JSON_THROW_ON_ERROR,
        ));
        if ($status !== 201) {
            throw new \RuntimeException("POST /proxies: $status $body");
        }
        $opened = json_decode($body, true, 512, JSON_THROW_ON_ERROR);
        $this->id = (string) $opened['id'];
        $this->url = (string) $opened['url'];
    }

    /** The control endpoint's report of this proxy (GET: what it forwarded). */
    public function reportUrl(): string
    {
        return $this->control . '/proxies/' . $this->id;
    }

    /**
     * @return list<array{method: string, target: string, headers: array<string, string>, idempotencyKey: string,
     *     dropped: bool, tokenRefused: bool}>
     */
    public function forwarded(): array
    {
        [$status, $body] = self::call('GET', $this->control . '/proxies/' . $this->id);
        if ($status !== 200) {
            throw new \RuntimeException("GET /proxies/{$this->id}: $status $body");
        }
        return json_decode($body, true, 512, JSON_THROW_ON_ERROR)['forwarded'];
    }

    public function close(): void
    {
        self::call('DELETE', $this->control . '/proxies/' . $this->id);
    }

    /** @return array{int, string} */
    private static function call(string $method, string $url, ?string $body = null): array
    {
        $curl = curl_init($url);
        curl_setopt_array($curl, [
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_TIMEOUT => 10,
            CURLOPT_HTTPHEADER => ['Content-Type: application/json'],
        ]);
        if ($body !== null) {
            curl_setopt($curl, CURLOPT_POSTFIELDS, $body);
        }
        $out = curl_exec($curl);
        if ($out === false) {
            throw new \RuntimeException("$method $url: " . curl_error($curl));
        }
        $status = (int) curl_getinfo($curl, CURLINFO_RESPONSE_CODE);
        curl_close($curl);
        return [$status, (string) $out];
    }
}
