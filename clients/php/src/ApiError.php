<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * An answer of a service outside 2xx, parsed from its problem body (RFC
 * 9457), or from the OAuth 2.0 error body of /oauth2/token.
 *
 * Switch on $code, never on $title or $detail, which are for people. It
 * never holds a secret: should a service echo a password or token sent with
 * the request, it is replaced by "[redacted]".
 */
final class ApiError extends ClientException
{
    public const MALFORMED_JSON = 'malformed_json';
    public const VALIDATION_FAILED = 'validation_failed';
    public const INVALID_CREDENTIALS = 'invalid_credentials';
    public const INVALID_CLIENT = 'invalid_client';
    public const INVALID_TOKEN = 'invalid_token';
    public const INSUFFICIENT_SCOPE = 'insufficient_scope';
    public const NOT_FOUND = 'not_found';
    public const PRECONDITION_FAILED = 'precondition_failed';
    public const CONVERSATION_CLOSED = 'conversation_closed';
    public const IDEMPOTENCY_KEY_REUSED = 'idempotency_key_reused';
    public const TOO_MANY_REQUESTS = 'too_many_requests';
    public const UNAVAILABLE = 'service_unavailable';

    /**
     * @param string            $method     the method of the request
     * @param string            $path       its path, without the query
     * @param int               $status     the HTTP status code
     * @param string            $problemCode the stable code of the problem, or "http_<status>" when the body has none
     * @param list<FieldError>  $fields     the offending inputs of a validation_failed problem
     * @param float|null        $retryAfter seconds to wait before retrying (Retry-After of a 429 or 503),
     *                                      null when absent
     * @param string            $requestId  the X-Request-ID of the answer: quote it in a bug report
     */
    public function __construct(
        public readonly string $method,
        public readonly string $path,
        public readonly int $status,
        public readonly string $problemCode,
        public readonly string $type = '',
        public readonly string $title = '',
        public readonly string $detail = '',
        public readonly string $instance = '',
        public readonly array $fields = [],
        public readonly ?float $retryAfter = null,
        public readonly string $requestId = '',
    ) {
        parent::__construct($this->describe(), $status);
    }

    /** The stable machine-readable code, e.g. "validation_failed". */
    public function code(): string
    {
        return $this->problemCode;
    }

    /** The error of the named field, null when it has none. */
    public function field(string $name): ?FieldError
    {
        foreach ($this->fields as $field) {
            if ($field->field === $name) {
                return $field;
            }
        }
        return null;
    }

    private function describe(): string
    {
        $text = sprintf('acme/platform: %s %s: %d %s', $this->method, $this->path, $this->status, $this->problemCode);
        if ($this->detail !== '') {
            $text .= ': ' . $this->detail;
        }
        if ($this->fields !== []) {
            $text .= ' (' . implode('; ', array_map(
                static fn (FieldError $f): string => $f->field . ': ' . $f->reason,
                $this->fields,
            )) . ')';
        }
        if ($this->retryAfter !== null) {
            $text .= sprintf(' [retry after %ss]', rtrim(rtrim(sprintf('%.3f', $this->retryAfter), '0'), '.'));
        }
        if ($this->requestId !== '') {
            $text .= ' [request id ' . $this->requestId . ']';
        }
        return $text;
    }
}
