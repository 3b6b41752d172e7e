<?php

declare(strict_types=1);

namespace Acme\Platform;

use Acme\Platform\Events\Event;
use Acme\Platform\Internal\CurlStream;
use Acme\Platform\Internal\CurlTransport;
use Acme\Platform\Internal\LinkHeader;
use Acme\Platform\Internal\Problem;
use Acme\Platform\Internal\Response;

/**
 * Calls the account and conversations services as one user (password
 * login) or one service client (client credentials).
 *
 * Give either $username, $password and $accountName, or $clientId and
 * $clientSecret. The client logs in on the first call that needs a token and
 * renews the session before it expires: it refreshes first
 * (POST /token/refresh) and logs in again when the refresh is refused. One
 * renewal runs at a time.
 *
 * Every answer outside 2xx throws ApiError; a request that gets no answer
 * throws TransportError. Reads, and creations (which carry an
 * Idempotency-Key), are retried up to $maxRetries times after a lost
 * connection, a 502, 503 or 504, or a 429 whose Retry-After is at most
 * $maxRetryWait seconds.
 *
 * @phpstan-type Conversation array{id: string, subject: string, status: string, participants: list<string>,
 *     createdAt: string, updatedAt: string, lastMessageAt: string|null}
 * @phpstan-type Message array{id: string, conversationId: string, author: string, body: string,
 *     metadata: array<string, mixed>, createdAt: string}
 * @phpstan-type Definition array{id: string, name: string, type: string, config: array<string, mixed>,
 *     enabled: bool, createdAt: string, updatedAt: string}
 * @phpstan-type User array{id: string, username: string, name: string|null, email: string|null, disabled: bool,
 *     createdAt: string, updatedAt: string, lastLoginAt: string|null, mfa: list<string>}
 * @phpstan-type UserInfo array{sub: string, preferred_username: string, name?: string, email?: string,
 *     email_verified: bool, account_id: string, account_name: string, mfa: list<string>}
 * @phpstan-type TotpEnrollment array{secret: string, otpauthUri: string}
 */
final class Client
{
    public const STATUS_OPEN = 'open';
    public const STATUS_SNOOZED = 'snoozed';
    public const STATUS_CLOSED = 'closed';

    private const USER_AGENT = 'acme-platform-php/0.1';
    private const RETRY_STATUSES = [429, 502, 503, 504];
    private const ETAG_CACHE_SIZE = 1024;
    /**
     * The deepest JSON answer parsed: far beyond what the services store
     * (they limit the nesting of config and metadata), and a parse error of
     * this client's own (ClientException) rather than exhausted memory
     * beyond it.
     */
    private const MAX_JSON_DEPTH = 512;

    private readonly string $accountUrl;
    private readonly ?string $conversationsUrl;
    private ?Secret $password; // replaced by changePassword
    private readonly ?Secret $clientSecret;
    private readonly TokenStore $tokenStore;
    private readonly CurlTransport $transport;
    private readonly float $timeout;
    /** @var (\Closure(string, string, array<string, mixed>): void)|null */
    private readonly ?\Closure $logger;

    private ?Session $session = null;
    private bool $loaded = false; // whether the store has been read
    private int $generation = 0; // incremented whenever the session changes
    private bool $stale = false; // a service refused the bearer of this generation
    private bool $renewing = false;
    /** @var array<string, string> the last ETag seen, by conversation id */
    private array $etags = [];

    /**
     * @param string        $accountUrl       base URL of the account service, e.g. http://localhost:8080
     * @param string|null   $conversationsUrl base URL of the conversations service (may carry a path prefix)
     * @param string|null   $scope            client credentials only: narrows the client's scopes
     * @param float         $timeout          seconds one request may take
     * @param TokenStore|null $tokenStore     where the session is kept; in memory by default
     * @param callable|null $logger           fn(string $level, string $message, array $context): void, e.g. a
     *                                        PSR-3 logger's log method; it never receives a secret
     */
    public function __construct(
        string $accountUrl,
        ?string $conversationsUrl = null,
        private readonly ?string $username = null,
        #[\SensitiveParameter] ?string $password = null,
        private readonly ?string $accountName = null,
        private readonly ?string $clientId = null,
        #[\SensitiveParameter] ?string $clientSecret = null,
        private readonly ?string $scope = null,
        float $timeout = 10.0,
        private readonly int $maxRetries = 2,
        private readonly float $maxRetryWait = 10.0,
        ?TokenStore $tokenStore = null,
        ?callable $logger = null,
    ) {
        $account = self::baseUrl('accountUrl', $accountUrl);
        if ($account === null) {
            throw new \InvalidArgumentException('accountUrl is required');
        }
        $this->accountUrl = $account;
        $this->conversationsUrl = self::baseUrl('conversationsUrl', $conversationsUrl);
        $user = [$username, $password, $accountName];
        $client = [$clientId, $clientSecret];
        $given = static fn (array $values): array => array_filter($values, static fn ($v) => $v !== null && $v !== '');
        if ($given($user) !== [] && $given($client) !== []) {
            throw new \InvalidArgumentException(
                'give either username, password and accountName, or clientId and clientSecret, not both'
            );
        }
        if ($given($client) !== []) {
            if (count($given($client)) !== 2) {
                throw new \InvalidArgumentException('client credentials need both clientId and clientSecret');
            }
        } elseif (count($given($user)) !== 3) {
            throw new \InvalidArgumentException(
                'username, password and accountName are all required (or clientId and clientSecret)'
            );
        }
        if ($timeout <= 0 || $maxRetries < 0 || $maxRetryWait < 0) {
            throw new \InvalidArgumentException('timeout must be positive, maxRetries and maxRetryWait not negative');
        }
        $this->password = $password !== null && $password !== '' ? new Secret($password) : null;
        $this->clientSecret = $clientSecret !== null && $clientSecret !== '' ? new Secret($clientSecret) : null;
        $this->tokenStore = $tokenStore ?? new MemoryTokenStore();
        $this->transport = new CurlTransport($timeout);
        $this->timeout = $timeout;
        $this->logger = $logger !== null ? \Closure::fromCallable($logger) : null;
    }

    /** @return array<string, mixed> what var_dump and print_r show: no secret */
    public function __debugInfo(): array
    {
        $who = $this->clientId !== null
            ? ['clientId' => $this->clientId]
            : ['username' => $this->username, 'accountName' => $this->accountName];
        return ['accountUrl' => $this->accountUrl, 'conversationsUrl' => $this->conversationsUrl] + $who
            + ['loggedIn' => $this->session !== null];
    }

    /** @return array<never> */
    public function __serialize(): array
    {
        throw new \LogicException('a Client holds credentials and cannot be serialized');
    }

    private static function baseUrl(string $name, ?string $raw): ?string
    {
        if ($raw === null || $raw === '') {
            return null;
        }
        $parts = parse_url($raw);
        if (
            $parts === false || !in_array($parts['scheme'] ?? '', ['http', 'https'], true)
            || ($parts['host'] ?? '') === ''
        ) {
            throw new \InvalidArgumentException(
                "$name: want an absolute http or https URL, such as http://localhost:8080"
            );
        }
        if (isset($parts['user']) || isset($parts['query']) || isset($parts['fragment'])) {
            throw new \InvalidArgumentException("$name: want a base URL without user info, query or fragment");
        }
        return rtrim($raw, '/');
    }

    // -- session -----------------------------------------------------------

    /**
     * Logs in now (POST /login or POST /oauth2/token) rather than on the
     * first call: useful to check the credentials at start-up. Throws
     * ApiError with code invalid_credentials (or invalid_client) when they
     * are wrong.
     */
    public function login(): void
    {
        $this->loaded = true;
        $this->keep($this->authenticate());
    }

    /**
     * Logs in with a code of the user's second factor (a current TOTP code
     * or an unused recovery code), after a call threw MfaRequiredError. A
     * code is accepted once: a later login needs a new one. A wrong code
     * throws ApiError invalid_credentials, as a wrong password does.
     */
    public function loginWithOtp(#[\SensitiveParameter] string $otp): void
    {
        if ($this->clientSecret !== null) {
            throw new ClientException('acme/platform: loginWithOtp: a service client has no second factor');
        }
        \assert($this->password !== null);
        $session = $this->tokenRequest('/login', new Secret(self::json([
            'username' => $this->username,
            'password' => $this->password->reveal(),
            'accountName' => $this->accountName,
            'otp' => $otp,
        ])), 'application/json', null);
        $this->loaded = true;
        $this->keep($session);
    }

    /**
     * Ends the session: revokes its refresh token (POST /logout) and forgets
     * the tokens, in the token store too. The next call logs in again.
     */
    public function logout(): void
    {
        $session = $this->loaded ? $this->session : $this->tokenStore->load();
        $this->session = null;
        $this->loaded = true;
        $this->stale = false;
        $this->generation++;
        $this->tokenStore->save(null);
        if ($session?->refreshToken !== null) {
            $refresh = $session->refreshToken;
            $this->exchange(
                'POST',
                $this->accountUrl . '/logout',
                new Secret(self::json(['refresh_token' => $refresh->reveal()])),
                ['Content-Type' => 'application/json'],
            );
        }
    }

    /** @return array{0: Secret, 1: int} a bearer that does not expire within the margin, and its generation */
    private function currentBearer(): array
    {
        if (!$this->loaded) {
            $this->session = $this->tokenStore->load();
            $this->loaded = true;
        }
        $session = $this->session;
        if ($session !== null && !$this->stale && microtime(true) < $session->renewAt()) {
            return [$session->bearer, $this->generation];
        }
        if ($this->renewing) {
            throw new \LogicException('acme/platform: a renewal is already in progress (re-entrant call)');
        }
        $this->renewing = true;
        try {
            // Used as is even if the clock already says it is due: a server
            // that issues tokens of a few seconds must not make us loop.
            $session = $this->keep($this->renew());
        } finally {
            $this->renewing = false;
        }
        return [$session->bearer, $this->generation];
    }

    private function keep(Session $session): Session
    {
        $this->session = $session;
        $this->stale = false;
        $this->generation++;
        $this->tokenStore->save($session);
        return $session;
    }

    /**
     * Refreshes the session when it has a refresh token, and logs in when it
     * has none or the refresh is refused (401: spent, revoked or expired;
     * 404: no refresh endpoint).
     */
    private function renew(): Session
    {
        $session = $this->session;
        if ($session?->refreshToken !== null) {
            $refresh = $session->refreshToken;
            try {
                $renewed = $this->tokenRequest(
                    '/token/refresh',
                    new Secret(self::json(['refresh_token' => $refresh->reveal()])),
                    'application/json',
                    null,
                );
                $this->log('debug', 'session renewed by refresh');
                return $renewed;
            } catch (ApiError $e) {
                if ($e->status !== 401 && $e->status !== 404) {
                    throw $e;
                }
                // Never offer a refused refresh token again.
                $this->session = $session->withoutRefreshToken();
                $this->tokenStore->save($this->session);
                $this->log('info', sprintf('refresh refused (%d %s); logging in again', $e->status, $e->code()));
            }
        }
        return $this->authenticate();
    }

    private function authenticate(): Session
    {
        if ($this->clientSecret !== null) {
            $form = ['grant_type' => 'client_credentials'];
            if ($this->scope !== null && $this->scope !== '') {
                $form['scope'] = $this->scope;
            }
            $encoded = new Secret(base64_encode(
                urlencode((string) $this->clientId) . ':' . urlencode($this->clientSecret->reveal())
            ));
            $session = $this->tokenRequest(
                '/oauth2/token',
                new Secret(http_build_query($form, '', '&', PHP_QUERY_RFC1738)),
                'application/x-www-form-urlencoded',
                new Secret('Basic ' . $encoded->reveal()),
            );
            $this->log('debug', 'obtained an access token with client credentials');
            return $session;
        }
        \assert($this->password !== null);
        $session = $this->tokenRequest('/login', new Secret(self::json([
            'username' => $this->username,
            'password' => $this->password->reveal(),
            'accountName' => $this->accountName,
        ])), 'application/json', null);
        $this->log('debug', 'logged in');
        return $session;
    }

    /**
     * Posts to a token endpoint and reads the token set: the bearer (id
     * token for a user, access token for a service client) and the refresh
     * token.
     *
     */
    private function tokenRequest(
        string $path,
        #[\SensitiveParameter] Secret $body,
        string $contentType,
        ?Secret $authorization,
    ): Session {
        $start = microtime(true); // expires_in counts from the answer: earlier is safe
        $response = $this->exchange(
            'POST',
            $this->accountUrl . $path,
            $body,
            ['Content-Type' => $contentType],
            $authorization,
        );
        $doc = json_decode($response->body, true);
        $tokens = is_array($doc) ? ($doc['tokens'] ?? $doc) : null;
        if (!is_array($tokens)) {
            throw new ClientException("acme/platform: POST $path: the response holds no token set");
        }
        return self::sessionOf($path, $start, $tokens, $tokens['id_token'] ?? $tokens['access_token'] ?? null);
    }

    /**
     * The session a token set from POST $path holds: $bearer (the token the
     * caller picked from it), the refresh token and the lifetime, counted
     * from $start, the request's start (earlier is safe).
     *
     * @param array<mixed>|null $tokens
     */
    private static function sessionOf(
        string $path,
        float $start,
        #[\SensitiveParameter] ?array $tokens,
        #[\SensitiveParameter] mixed $bearer,
    ): Session {
        $expiresIn = $tokens['expires_in'] ?? null;
        if (!is_string($bearer) || $bearer === '' || !(is_int($expiresIn) || is_float($expiresIn)) || $expiresIn < 1) {
            throw new ClientException("acme/platform: POST $path: the response has no token or no positive expires_in");
        }
        $refresh = $tokens['refresh_token'] ?? null;
        $lifetime = (float) min($expiresIn, 365 * 24 * 3600);
        return new Session(
            new Secret($bearer),
            is_string($refresh) && $refresh !== '' ? new Secret($refresh) : null,
            $start + $lifetime,
            $lifetime,
        );
    }

    /** @param array<string, mixed> $context */
    private function log(string $level, string $message, array $context = []): void
    {
        if ($this->logger !== null) {
            ($this->logger)($level, $message, $context);
        }
    }

    // -- HTTP ------------------------------------------------------------

    /**
     * One request; an answer outside 2xx throws ApiError. Nothing of the
     * request but its method and path goes into the error, so no secret can.
     *
     * @param array<string, string> $headers
     */
    private function exchange(
        string $method,
        string $url,
        #[\SensitiveParameter] string|Secret|null $body,
        array $headers,
        ?Secret $authorization = null,
    ): Response {
        $headers = [
            'Accept' => 'application/json, application/problem+json',
            'User-Agent' => self::USER_AGENT,
        ] + $headers;
        $response = $this->transport->send($method, $url, $headers, $body, $authorization);
        if ($response->status >= 200 && $response->status < 300) {
            return $response;
        }
        throw Problem::toError($method, self::path($url), $response);
    }

    /**
     * An authenticated request with $payload as its JSON body (unless null).
     * A 401 invalid_token renews the session and repeats the request once;
     * with $retry, lost connections and 429/502/503/504 are retried as the
     * class documents.
     *
     * @param array<string, string> $headers
     */
    private function call(
        string $method,
        string $url,
        mixed $payload = null,
        string $contentType = 'application/json',
        array $headers = [],
        bool $retry = false,
    ): Response {
        // A Secret payload is a JSON body that holds a password, sent as is.
        $body = $payload instanceof Secret ? $payload : ($payload !== null ? self::json($payload) : null);
        if ($body !== null) {
            $headers['Content-Type'] = $contentType;
        }
        return $this->withRetries(
            $method,
            $url,
            $retry,
            fn (Secret $authorization): Response => $this->exchange($method, $url, $body, $headers, $authorization),
        );
    }

    /**
     * Sends a request with the session's bearer ($send gets the value of
     * the Authorization header): a 401 invalid_token renews the session and
     * sends it once more; with $retry, lost connections and
     * 429/502/503/504 are retried as the class documents.
     *
     * @template T
     * @param \Closure(Secret): T $send
     * @return T
     */
    private function withRetries(string $method, string $url, bool $retry, \Closure $send): mixed
    {
        $renewed = false;
        $attempt = 0;
        while (true) {
            [$bearer, $generation] = $this->currentBearer();
            try {
                return $send(new Secret('Bearer ' . $bearer->reveal()));
            } catch (ApiError $e) {
                if ($e->status === 401 && $e->code() === ApiError::INVALID_TOKEN && !$renewed) {
                    $renewed = true;
                    if ($this->generation === $generation) {
                        $this->stale = true;
                    }
                    continue;
                }
                if (!$retry || !in_array($e->status, self::RETRY_STATUSES, true) || $attempt >= $this->maxRetries) {
                    throw $e;
                }
                $wait = $e->retryAfter ?? 0.25 * 2 ** $attempt;
                if ($wait > $this->maxRetryWait) {
                    throw $e;
                }
                $cause = $e->status . ' ' . $e->code();
            } catch (TransportError $e) {
                if (!$retry || $attempt >= $this->maxRetries) {
                    throw $e;
                }
                $wait = 0.25 * 2 ** $attempt;
                $cause = $e->reason;
            }
            $attempt++;
            $this->log('info', sprintf(
                '%s %s: %s; retry %d in %.2fs',
                $method,
                self::path($url),
                $cause,
                $attempt,
                $wait,
            ));
            usleep((int) ($wait * 1e6));
        }
    }

    private static function json(#[\SensitiveParameter] mixed $value): string
    {
        return json_encode($value, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
    }

    private static function decode(Response $response, string $method, string $url): mixed
    {
        try {
            return json_decode($response->body, true, self::MAX_JSON_DEPTH, JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new ClientException(sprintf(
                'acme/platform: %s %s: %s',
                $method,
                self::path($url),
                $e->getCode() === JSON_ERROR_DEPTH
                    ? 'the response is nested more than ' . self::MAX_JSON_DEPTH . ' levels deep'
                    : 'the response is not JSON',
            ));
        }
    }

    /**
     * $url with the query of the members of $query that are not null.
     *
     * @param array<string, string|int|null> $query
     */
    private static function withQuery(string $url, array $query): string
    {
        $given = array_filter($query, static fn ($v) => $v !== null);
        return $given === [] ? $url : $url . '?' . http_build_query($given, '', '&', PHP_QUERY_RFC3986);
    }

    private static function path(string $url): string
    {
        return (string) (parse_url($url, PHP_URL_PATH) ?: '/');
    }

    private function conversationsEndpoint(string $path): string
    {
        if ($this->conversationsUrl === null) {
            throw new ClientException('acme/platform: conversationsUrl is not configured');
        }
        return $this->conversationsUrl . $path;
    }

    private function conversationUrl(string $conversationId): string
    {
        if ($conversationId === '') {
            throw new \InvalidArgumentException('empty conversation id');
        }
        return $this->conversationsEndpoint('/v1/conversations/' . rawurlencode($conversationId));
    }

    /**
     * Pages of a listing, following Link: rel="next" as the loop goes on;
     * $base is the service's root (the conversations service's by default).
     *
     * @return \Generator<int, Page<array<string, mixed>>>
     */
    private function walk(string $firstUrl, ?string $base = null): \Generator
    {
        $base ??= $this->conversationsEndpoint('');
        $url = $firstUrl;
        $seen = [];
        while (true) {
            $page = $this->page($url, $base);
            yield $page;
            $next = $page->nextUrl;
            if ($next === null) {
                return;
            }
            if (isset($seen[$next])) {
                throw new ClientException('acme/platform: the next link repeats an earlier page');
            }
            $seen[$next] = true;
            $url = $next;
        }
    }

    /**
     * One page of a listing: GET $url, its items and the absolute URL of its
     * next link, resolved against $base, the service's root.
     *
     * @return Page<array<string, mixed>>
     */
    private function page(string $url, string $base): Page
    {
        $response = $this->call('GET', $url, retry: true);
        $items = self::decode($response, 'GET', $url);
        if (!is_array($items) || !array_is_list($items)) {
            throw new ClientException('acme/platform: GET ' . self::path($url) . ': the response is no JSON array');
        }
        $target = LinkHeader::next($response->headerValues('link'));
        return new Page($items, $target !== null ? LinkHeader::resolve($base, $url, $target) : null);
    }

    private function rememberEtag(string $conversationId, Response $response): void
    {
        $etag = $response->header('etag');
        if ($etag === '') {
            return;
        }
        unset($this->etags[$conversationId]);
        $this->etags[$conversationId] = $etag;
        if (count($this->etags) > self::ETAG_CACHE_SIZE) {
            unset($this->etags[array_key_first($this->etags)]);
        }
    }

    /**
     * The last ETag this client saw for the conversation (from a get, create
     * or update), null when it saw none.
     */
    public function etag(string $conversationId): ?string
    {
        return $this->etags[$conversationId] ?? null;
    }

    // -- account service -------------------------------------------------

    /**
     * The integration definitions of the caller's account (GET
     * /definitions); an empty array when there are none.
     *
     * @return list<Definition>
     */
    public function listDefinitions(): array
    {
        $url = $this->accountUrl . '/definitions';
        $doc = self::decode($this->call('GET', $url, retry: true), 'GET', $url);
        if ($doc === null) {
            return [];
        }
        if (!is_array($doc) || !array_is_list($doc)) {
            throw new ClientException('acme/platform: GET /definitions: the response is no JSON array');
        }
        return $doc;
    }

    // -- users (a service client with users:read / users:write) ---------

    private function userUrl(string $userId): string
    {
        if ($userId === '') {
            throw new \InvalidArgumentException('empty user id');
        }
        return $this->accountUrl . '/users/' . rawurlencode($userId);
    }

    /**
     * Signs a user up in the service client's account (POST /users, scope
     * users:write). A taken name throws ApiError 409 username_taken; a
     * password the policy refuses 400 weak_password, whose fieldErrors say
     * why.
     *
     * @return User
     */
    public function createUser(
        string $username,
        #[\SensitiveParameter] string $password,
        ?string $name = null,
        ?string $email = null,
    ): array {
        $doc = ['username' => $username, 'password' => $password];
        if ($name !== null) {
            $doc['name'] = $name;
        }
        if ($email !== null) {
            $doc['email'] = $email;
        }
        $url = $this->accountUrl . '/users';
        $body = new Secret(self::json($doc));
        unset($doc);
        /** @var User */
        return self::decode($this->call('POST', $url, $body), 'POST', $url);
    }

    /**
     * A user of the account (GET /users/{id}, users:read); an id of another
     * account throws 404 not_found.
     *
     * @return User
     */
    public function getUser(string $userId): array
    {
        $url = $this->userUrl($userId);
        /** @var User */
        return self::decode($this->call('GET', $url, retry: true), 'GET', $url);
    }

    /**
     * The account's users page by page, oldest first (GET /users,
     * users:read); $username lists only the user of that name (exact,
     * case-insensitive).
     *
     * @return \Generator<int, Page<User>>
     */
    public function userPages(?int $limit = null, ?string $username = null): \Generator
    {
        $url = self::withQuery($this->accountUrl . '/users', ['limit' => $limit, 'username' => $username]);
        /** @var \Generator<int, Page<User>> */
        return $this->walk($url, $this->accountUrl);
    }

    /**
     * Every user of the account, oldest first, across all pages.
     *
     * @return \Generator<int, User>
     */
    public function users(?int $limit = null, ?string $username = null): \Generator
    {
        foreach ($this->userPages($limit, $username) as $page) {
            yield from $page->items;
        }
    }

    /**
     * Changes name, email (null clears either) or disabled of a user: a
     * JSON merge patch (PATCH /users/{id}, users:write). Only the members
     * given change. Disabling ends every session of the user.
     *
     * @param array{name?: string|null, email?: string|null, disabled?: bool} $patch
     * @return User
     */
    public function updateUser(string $userId, array $patch): array
    {
        $unknown = array_diff(array_keys($patch), ['name', 'email', 'disabled']);
        if ($unknown !== []) {
            throw new \InvalidArgumentException('updateUser: only name, email and disabled may change');
        }
        $url = $this->userUrl($userId);
        $response = $this->call('PATCH', $url, (object) $patch, 'application/merge-patch+json');
        /** @var User */
        return self::decode($response, 'PATCH', $url);
    }

    /** Sets a user's password (PUT /users/{id}/password, users:write); every session of the user ends. */
    public function setUserPassword(string $userId, #[\SensitiveParameter] string $password): void
    {
        $this->call('PUT', $this->userUrl($userId) . '/password', new Secret(self::json(['password' => $password])));
    }

    /** Erases a user: its document, sessions and login counters (DELETE /users/{id}, users:write). */
    public function deleteUser(string $userId): void
    {
        $this->call('DELETE', $this->userUrl($userId));
    }

    // -- self-service (a user's own session) -------------------------------

    /**
     * Who the client's user is (GET /userinfo, OpenID Connect UserInfo). A
     * service client has no user.
     *
     * @return UserInfo
     */
    public function userInfo(): array
    {
        if ($this->clientSecret !== null) {
            throw new ClientException('acme/platform: userInfo: a service client has no user');
        }
        $url = $this->accountUrl . '/userinfo';
        /** @var UserInfo */
        return self::decode($this->call('GET', $url, retry: true), 'GET', $url);
    }

    /**
     * Changes the password of the client's user (POST /password). The
     * service ends every session of the user and answers with the tokens of
     * a new one, which this client keeps (and the new password for later
     * logins). A wrong current password throws ApiError 403
     * invalid_current_password; repeated ones are throttled like logins.
     */
    public function changePassword(
        #[\SensitiveParameter] string $currentPassword,
        #[\SensitiveParameter] string $newPassword,
        #[\SensitiveParameter] ?string $otp = null,
    ): void {
        if ($this->clientSecret !== null) {
            throw new ClientException('acme/platform: changePassword: a service client has no password');
        }
        $start = microtime(true);
        $url = $this->accountUrl . '/password';
        $body = ['currentPassword' => $currentPassword, 'newPassword' => $newPassword];
        if ($otp !== null && $otp !== '') {
            $body['otp'] = $otp;
        }
        $response = $this->call('POST', $url, new Secret(self::json($body)));
        $doc = self::decode($response, 'POST', $url);
        $tokens = is_array($doc) ? ($doc['tokens'] ?? null) : null;
        $tokens = is_array($tokens) ? $tokens : null;
        $session = self::sessionOf('/password', $start, $tokens, $tokens['id_token'] ?? null);
        $this->password = new Secret($newPassword);
        $this->loaded = true;
        $this->keep($session);
    }

    /**
     * Begins enrolling a TOTP second factor (POST /mfa/totp): a new secret
     * and its otpauth:// URI, pending until verifyTotp(). 409 mfa_enrolled
     * while one is active.
     *
     * @return TotpEnrollment
     */
    public function enrollTotp(): array
    {
        $this->userOnly('enrollTotp');
        $url = $this->accountUrl . '/mfa/totp';
        /** @var TotpEnrollment */
        return self::decode($this->call('POST', $url), 'POST', $url);
    }

    /**
     * Activates the pending secret with a current code (POST
     * /mfa/totp/verify) and returns the 10 recovery codes, shown only now.
     * A wrong code throws ApiError 403 invalid_otp.
     *
     * @return list<string>
     */
    public function verifyTotp(#[\SensitiveParameter] string $code): array
    {
        $this->userOnly('verifyTotp');
        $url = $this->accountUrl . '/mfa/totp/verify';
        $doc = self::decode($this->call('POST', $url, new Secret(self::json(['code' => $code]))), 'POST', $url);
        $codes = is_array($doc) ? ($doc['recoveryCodes'] ?? null) : null;
        if (!is_array($codes)) {
            throw new ClientException('acme/platform: POST /mfa/totp/verify: the response holds no recovery codes');
        }
        return array_values(array_map('strval', $codes));
    }

    /**
     * Removes the user's second factor (DELETE /mfa/totp) with a code
     * (current or recovery) or the password, exactly one. Wrong: ApiError
     * 403 invalid_otp or invalid_current_password.
     */
    public function removeTotp(
        #[\SensitiveParameter] ?string $code = null,
        #[\SensitiveParameter] ?string $password = null,
    ): void {
        $this->userOnly('removeTotp');
        if (($code === null) === ($password === null)) {
            throw new \InvalidArgumentException('removeTotp: give $code or $password, exactly one');
        }
        $proof = $code !== null ? ['code' => $code] : ['password' => $password];
        $this->call('DELETE', $this->accountUrl . '/mfa/totp', new Secret(self::json($proof)));
    }

    /** Removes a user's second factor (DELETE /users/{id}/mfa, users:write); every session of the user ends. */
    public function resetUserMfa(string $userId): void
    {
        $this->call('DELETE', $this->userUrl($userId) . '/mfa');
    }

    private function userOnly(string $op): void
    {
        if ($this->clientSecret !== null) {
            throw new ClientException("acme/platform: {$op}: a service client has no second factor");
        }
    }

    // -- conversations ---------------------------------------------------

    /**
     * The caller's conversations page by page (newest activity first),
     * following each page's Link: rel="next"; the next page is requested
     * only when the loop asks for it. $limit is the page size (1..100; the
     * service's default 10 when null).
     *
     * @return \Generator<int, Page<Conversation>>
     */
    public function conversationPages(
        ?int $limit = null,
        ?string $status = null,
        ?string $updatedAfter = null,
    ): \Generator {
        return $this->walk(self::withQuery(
            $this->conversationsEndpoint('/v1/conversations'),
            ['limit' => $limit, 'status' => $status, 'updatedAfter' => $updatedAfter],
        ));
    }

    /**
     * Every conversation of the caller, newest activity first, across all
     * pages:
     *
     *     foreach ($client->conversations(status: 'open') as $conversation) {
     *         echo $conversation['subject'], "\n";
     *     }
     *
     * @return \Generator<int, Conversation>
     */
    public function conversations(?int $limit = null, ?string $status = null, ?string $updatedAfter = null): \Generator
    {
        foreach ($this->conversationPages($limit, $status, $updatedAfter) as $page) {
            foreach ($page->items as $item) {
                yield $item;
            }
        }
    }

    /**
     * One conversation (GET /v1/conversations/{id}); ApiError not_found when
     * the caller has none with this id.
     *
     * @return Conversation
     */
    public function getConversation(string $conversationId): array
    {
        $url = $this->conversationUrl($conversationId);
        $response = $this->call('GET', $url, retry: true);
        $this->rememberEtag($conversationId, $response);
        return self::decode($response, 'GET', $url);
    }

    /**
     * Creates a conversation (POST /v1/conversations). A user is always a
     * participant; a service client names every participant. The request
     * carries an Idempotency-Key (a new random one unless given), reused by
     * the call's own retries, so that a retried creation creates one
     * conversation.
     *
     * @param list<string>|null $participants user ids
     * @return Conversation
     */
    public function createConversation(
        ?string $subject = null,
        ?array $participants = null,
        ?string $status = null,
        ?string $idempotencyKey = null,
    ): array {
        $payload = array_filter(
            [
                'subject' => $subject,
                'participants' => $participants !== null ? array_values($participants) : null,
                'status' => $status,
            ],
            static fn ($v) => $v !== null,
        );
        $url = $this->conversationsEndpoint('/v1/conversations');
        $response = $this->call('POST', $url, (object) $payload, headers: [
            'Idempotency-Key' => $idempotencyKey ?? self::newIdempotencyKey(),
        ], retry: true);
        $conversation = self::decode($response, 'POST', $url);
        if (is_array($conversation) && is_string($conversation['id'] ?? null)) {
            $this->rememberEtag($conversation['id'], $response);
        }
        return $conversation;
    }

    /**
     * Changes the subject and/or status (PATCH, a JSON merge patch). The
     * request carries If-Match with $ifMatch or, by default, the last ETag
     * this client saw for the conversation, so that a change made by someone
     * else in between is an ApiError 412 precondition_failed rather than
     * silently overwritten: read the conversation again and retry. Without a
     * known ETag the change is unconditional. Not retried automatically.
     *
     * @return Conversation
     */
    public function updateConversation(
        string $conversationId,
        ?string $subject = null,
        ?string $status = null,
        ?string $ifMatch = null,
    ): array {
        $patch = array_filter(['subject' => $subject, 'status' => $status], static fn ($v) => $v !== null);
        if ($patch === []) {
            throw new \InvalidArgumentException('updateConversation: nothing to change (give subject and/or status)');
        }
        $tag = $ifMatch ?? $this->etag($conversationId);
        $url = $this->conversationUrl($conversationId);
        $response = $this->call(
            'PATCH',
            $url,
            $patch,
            'application/merge-patch+json',
            $tag !== null ? ['If-Match' => $tag] : [],
        );
        $this->rememberEtag($conversationId, $response);
        return self::decode($response, 'PATCH', $url);
    }

    // -- messages --------------------------------------------------------

    /**
     * Posts a message (POST /v1/conversations/{id}/messages); the author is
     * the caller. Like createConversation, it carries an Idempotency-Key
     * that its retries reuse.
     *
     * @param array<string, mixed>|null $metadata
     * @return Message
     */
    public function postMessage(
        string $conversationId,
        string $body,
        ?array $metadata = null,
        ?string $idempotencyKey = null,
    ): array {
        $payload = ['body' => $body];
        if ($metadata !== null) {
            $payload['metadata'] = (object) $metadata;
        }
        $url = $this->conversationUrl($conversationId) . '/messages';
        $response = $this->call('POST', $url, $payload, headers: [
            'Idempotency-Key' => $idempotencyKey ?? self::newIdempotencyKey(),
        ], retry: true);
        $message = self::decode($response, 'POST', $url);
        $this->trackEtagAfterMessage($conversationId);
        return $message;
    }

    /**
     * A message changes its conversation, and so its ETag, which the
     * message's answer does not carry. When the client holds a tag of the
     * conversation, it reads the conversation again (one GET) and keeps the
     * new tag, so that the next update is conditional on the state after
     * the message. Should that read fail, the message stands and the old
     * tag stays: the next update then gets a 412, never a silent overwrite.
     */
    private function trackEtagAfterMessage(string $conversationId): void
    {
        if ($this->etag($conversationId) === null) {
            return;
        }
        try {
            $this->getConversation($conversationId);
        } catch (ClientException $e) {
            $this->log('info', 're-reading the conversation after a message failed: ' . $e->getMessage());
        }
    }

    /**
     * The messages of a conversation page by page, newest first, following
     * Link: rel="next".
     *
     * @return \Generator<int, Page<Message>>
     */
    public function messagePages(string $conversationId, ?int $limit = null): \Generator
    {
        return $this->walk(self::withQuery($this->conversationUrl($conversationId) . '/messages', ['limit' => $limit]));
    }

    /**
     * Every message of a conversation, newest first, across all pages.
     *
     * @return \Generator<int, Message>
     */
    public function messages(string $conversationId, ?int $limit = null): \Generator
    {
        foreach ($this->messagePages($conversationId, $limit) as $page) {
            foreach ($page->items as $item) {
                yield $item;
            }
        }
    }

    // -- webhooks ----------------------------------------------------------
    // A service client with the scopes webhooks:manage and conversations:read.

    private function webhookUrl(string $webhookId, string $suffix = ''): string
    {
        if ($webhookId === '') {
            throw new \InvalidArgumentException('empty webhook endpoint id');
        }
        return $this->conversationsEndpoint('/v1/webhooks/' . rawurlencode($webhookId) . $suffix);
    }

    /**
     * Creates an endpoint (POST /v1/webhooks). The answer alone carries its
     * 'secret': keep it to verify deliveries (Webhook::verify). A 21st
     * endpoint is an ApiError 409 too_many_endpoints.
     *
     * @param list<string>|null $events
     * @return array<string, mixed>
     */
    public function createWebhook(string $url, ?array $events = null, ?string $description = null, ?bool $enabled = null): array
    {
        $payload = array_filter(
            ['url' => $url, 'events' => $events !== null ? array_values($events) : null, 'description' => $description, 'enabled' => $enabled],
            static fn ($v) => $v !== null,
        );
        $target = $this->conversationsEndpoint('/v1/webhooks');
        return self::decode($this->call('POST', $target, $payload), 'POST', $target);
    }

    /**
     * Every endpoint of the account, newest first, page after page.
     *
     * @return \Generator<int, array<string, mixed>>
     */
    public function webhooks(?int $limit = null): \Generator
    {
        foreach ($this->walk(self::withQuery($this->conversationsEndpoint('/v1/webhooks'), ['limit' => $limit])) as $page) {
            yield from $page->items;
        }
    }

    /** @return array<string, mixed> one endpoint, never its secret */
    public function getWebhook(string $webhookId): array
    {
        $url = $this->webhookUrl($webhookId);
        return self::decode($this->call('GET', $url, retry: true), 'GET', $url);
    }

    /**
     * Changes 'url', 'events', 'description' and/or 'enabled' (a JSON merge
     * patch); enabling clears 'disabledReason'.
     *
     * @param array<string, mixed> $patch
     * @return array<string, mixed>
     */
    public function updateWebhook(string $webhookId, array $patch): array
    {
        if ($patch === [] || array_diff(array_keys($patch), ['url', 'events', 'description', 'enabled']) !== []) {
            throw new \InvalidArgumentException('updateWebhook: give url, events, description and/or enabled');
        }
        $url = $this->webhookUrl($webhookId);
        return self::decode($this->call('PATCH', $url, $patch, 'application/merge-patch+json'), 'PATCH', $url);
    }

    public function deleteWebhook(string $webhookId): void
    {
        $this->call('DELETE', $this->webhookUrl($webhookId));
    }

    /**
     * A new secret; the previous one keeps signing beside it for
     * $overlapSeconds (default: the service's, 24 h; 0 stops it at once).
     */
    public function rotateWebhookSecret(string $webhookId, ?int $overlapSeconds = null): string
    {
        $url = $this->webhookUrl($webhookId, '/rotate-secret');
        $payload = $overlapSeconds !== null ? ['overlap' => $overlapSeconds] : new \stdClass();
        return (string) self::decode($this->call('POST', $url, $payload), 'POST', $url)['secret'];
    }

    /**
     * Sends a webhook.test event to this endpoint only.
     *
     * @return array<string, mixed> its delivery, pending
     */
    public function testWebhook(string $webhookId): array
    {
        $url = $this->webhookUrl($webhookId, '/test');
        return self::decode($this->call('POST', $url), 'POST', $url);
    }

    /**
     * Every delivery of the endpoint, newest first.
     *
     * @return \Generator<int, array<string, mixed>>
     */
    public function webhookDeliveries(string $webhookId, ?int $limit = null): \Generator
    {
        foreach ($this->walk(self::withQuery($this->webhookUrl($webhookId, '/deliveries'), ['limit' => $limit])) as $page) {
            yield from $page->items;
        }
    }

    /** Delivers one delivery again now, with the same webhook-id. */
    public function retryWebhookDelivery(string $webhookId, string $deliveryId): void
    {
        if ($deliveryId === '') {
            throw new \InvalidArgumentException('empty delivery id');
        }
        $this->call('POST', $this->webhookUrl($webhookId, '/deliveries/' . rawurlencode($deliveryId) . '/retry'));
    }


    // -- events ----------------------------------------------------------

    /**
     * One page of the event feed (GET /v1/events): the events after $after,
     * or the page at $pageUrl (a previous page's nextUrl).
     * EventPage::$position is where to continue from.
     *
     * @param list<string>|null $types only these types (Event::MESSAGE_CREATED, …)
     */
    public function eventPage(
        ?int $after = null,
        ?int $limit = null,
        ?array $types = null,
        ?string $pageUrl = null,
    ): EventPage {
        self::checkPosition($after);
        $base = $this->conversationsEndpoint('');
        $url = $pageUrl !== null
            ? LinkHeader::resolve($base, $pageUrl, $pageUrl)
            : $this->eventsUrl('/v1/events', $after, $limit, $types);
        $page = $this->page($url, $base);
        $next = $page->nextUrl;
        $position = null;
        if ($next !== null) {
            parse_str((string) parse_url($next, PHP_URL_QUERY), $query);
            $after = $query['after'] ?? null;
            $position = is_string($after) && ctype_digit($after) ? (int) $after : null;
        }
        return new EventPage(array_map(Event::fromArray(...), $page->items), $next, $position);
    }

    /**
     * The event feed after $after (a stored position; default: from the
     * oldest kept), as an EventFeed: a foreach over it reads page after page
     * while they come full (more are ready), up to the newest event, and
     * position() is where to resume from. $limit is
     * the page size (1..1000). An ApiError 410 cursor_expired says the
     * position is older than the service keeps: resynchronise (e.g.
     * conversations(updatedAfter: …)).
     *
     * @param list<string>|null $types only these types (Event::MESSAGE_CREATED, …)
     */
    public function events(?int $after = null, ?int $limit = null, ?array $types = null): EventFeed
    {
        self::checkPosition($after);
        return new EventFeed(
            $after,
            $limit ?? EventFeed::DEFAULT_PAGE_SIZE,
            fn (?int $position): string => $this->eventsUrl('/v1/events', $position, $limit, $types),
            fn (string $url): EventPage => $this->eventPage(pageUrl: $url),
        );
    }

    /**
     * Follows the live stream of events (GET /v1/events/stream, Server-Sent
     * Events): a foreach over the EventStream blocks until each event
     * arrives, for as long as the loop runs, reconnecting with a fresh token
     * and Last-Event-ID when the connection ends or drops. position() is the
     * last sequence received. An error answer (400, 410 cursor_expired, 429
     * beyond 10 streams) is an ApiError.
     *
     * @param list<string>|null $types only these types (Event::MESSAGE_CREATED, …)
     */
    public function streamEvents(?int $after = null, ?array $types = null): EventStream
    {
        self::checkPosition($after);
        return new EventStream(function (?string $lastEventId) use ($after, $types): CurlStream {
            $url = $this->eventsUrl('/v1/events/stream', $lastEventId ?? $after, null, $types);
            $headers = ['Accept' => 'text/event-stream', 'User-Agent' => self::USER_AGENT];
            if ($lastEventId !== null) {
                $headers['Last-Event-ID'] = $lastEventId;
            }
            $open = function (Secret $authorization) use ($url, $headers): CurlStream {
                $stream = new CurlStream($url, $headers, $authorization, $this->timeout);
                $status = $stream->status();
                if ($status < 200 || $status >= 300) {
                    throw Problem::toError('GET', self::path($url), $stream->response());
                }
                return $stream;
            };
            return $this->withRetries('GET', $url, true, $open);
        }, $this->maxRetries, $this->maxRetryWait);
    }

    /** @param list<string>|null $types */
    private function eventsUrl(string $path, int|string|null $after, ?int $limit, ?array $types): string
    {
        return self::withQuery(
            $this->conversationsEndpoint($path),
            ['after' => $after, 'limit' => $limit, 'types' => $types ? implode(',', $types) : null],
        );
    }

    /** A stored position is a sequence: not negative. */
    private static function checkPosition(?int $after): void
    {
        if ($after !== null && $after < 0) {
            throw new \InvalidArgumentException('after must be a sequence: a whole number, not negative');
        }
    }

    /** A random (version 4) UUID. */
    private static function newIdempotencyKey(): string
    {
        $bytes = random_bytes(16);
        $bytes[6] = chr((ord($bytes[6]) & 0x0f) | 0x40);
        $bytes[8] = chr((ord($bytes[8]) & 0x3f) | 0x80);
        return vsprintf('%s%s-%s-%s-%s-%s%s%s', str_split(bin2hex($bytes), 4));
    }
}
