<?php

declare(strict_types=1);

namespace Acme\Platform;

/**
 * An answer of a service outside 2xx, parsed from its problem body (RFC
 * 9457), or from the OAuth 2.0 error body of /oauth2/token.
 *
 * Switch on code(), never on $title or $detail, which are for people. Its
 * texts are the service's, unchanged; it never holds a secret because the
 * client never puts one there (the request's body and headers are not
 * kept, and the services never echo a password or token).
 */
class ApiError extends ClientException
{
    // One constant for every code of docs/errors.md, and the error codes of
    // the token endpoint (RFC 6749 section 5.2).
    public const MALFORMED_JSON = 'malformed_json';
    public const VALIDATION_FAILED = 'validation_failed';
    public const INVALID_CREDENTIALS = 'invalid_credentials';
    public const INVALID_TOKEN = 'invalid_token';
    public const INSUFFICIENT_SCOPE = 'insufficient_scope';
    public const WEAK_PASSWORD = 'weak_password';
    public const USERNAME_TAKEN = 'username_taken';
    public const INVALID_CURRENT_PASSWORD = 'invalid_current_password';
    public const MFA_REQUIRED = 'mfa_required';
    public const INVALID_OTP = 'invalid_otp';
    public const MFA_ENROLLED = 'mfa_enrolled';
    public const MFA_NOT_STARTED = 'mfa_not_started';
    public const NOT_FOUND = 'not_found';
    public const METHOD_NOT_ALLOWED = 'method_not_allowed';
    public const CONFLICT = 'conflict';
    public const PRECONDITION_FAILED = 'precondition_failed';
    public const CONVERSATION_CLOSED = 'conversation_closed';
    public const TOO_MANY_PARTICIPANTS = 'too_many_participants';
    public const TOO_MANY_ENDPOINTS = 'too_many_endpoints';
    public const LAST_PARTICIPANT = 'last_participant';
    public const IDEMPOTENCY_KEY_REUSED = 'idempotency_key_reused';
    public const CURSOR_EXPIRED = 'cursor_expired';
    public const BODY_TOO_LARGE = 'body_too_large';
    public const UNSUPPORTED_MEDIA_TYPE = 'unsupported_media_type';
    public const TOO_MANY_REQUESTS = 'too_many_requests';
    public const SERVICE_UNAVAILABLE = 'service_unavailable';
    public const OVERLOADED = 'overloaded';
    public const MALFORMED_REQUEST = 'malformed_request';
    public const UNSUPPORTED_TRANSFER_ENCODING = 'unsupported_transfer_encoding';
    public const HEADERS_TOO_LARGE = 'headers_too_large';
    public const REQUEST_TIMEOUT = 'request_timeout';
    public const SLOW_DOWN = 'slow_down';
    public const TEMPORARILY_UNAVAILABLE = 'temporarily_unavailable';
    public const SERVER_ERROR = 'server_error';
    public const INTERNAL_ERROR = 'internal_error';
    public const INVALID_REQUEST = 'invalid_request';
    public const INVALID_CLIENT = 'invalid_client';
    public const INVALID_GRANT = 'invalid_grant';
    public const INVALID_SCOPE = 'invalid_scope';
    public const UNAUTHORIZED_CLIENT = 'unauthorized_client';
    public const UNSUPPORTED_GRANT_TYPE = 'unsupported_grant_type';
    /** The sign-in page's 403 for a form without this browser's CSRF token: a browser sees it, never an API call. */
    public const INVALID_CSRF_TOKEN = 'invalid_csrf_token';
    /** The former name of SERVICE_UNAVAILABLE. */
    public const UNAVAILABLE = self::SERVICE_UNAVAILABLE;

    /**
     * @param string            $method     the method of the request
     * @param string            $path       its path, without the query
     * @param int               $status     the HTTP status code
     * @param string            $problemCode the stable code of the problem, or "http_<status>" when the body has none
     * @param list<FieldError>  $fieldErrors the offending inputs of a validation_failed problem, empty otherwise
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
        public readonly array $fieldErrors = [],
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

    private function describe(): string
    {
        $text = sprintf('acme/platform: %s %s: %d %s', $this->method, $this->path, $this->status, $this->problemCode);
        if ($this->detail !== '') {
            $text .= ': ' . $this->detail;
        }
        if ($this->fieldErrors !== []) {
            $text .= ' (' . implode('; ', array_map(
                static fn (FieldError $f): string => $f->field . ': ' . $f->reason,
                $this->fieldErrors,
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
