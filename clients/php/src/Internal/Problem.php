<?php

declare(strict_types=1);

namespace Acme\Platform\Internal;

use Acme\Platform\ApiError;
use Acme\Platform\FieldError;
use Acme\Platform\MfaRequiredError;

/**
 * Builds the ApiError of an answer outside 2xx.
 *
 * @internal
 */
final class Problem
{
    private const MAX_RETRY_AFTER = 365 * 24 * 3600.0;

    /**
     * Problem bodies give code, title, detail and field errors; an OAuth
     * 2.0 error body ({"error", "error_description"}) gives code and
     * detail; any other body the code "http_<status>". The texts are taken
     * as the service wrote them: no secret of the request is ever put into
     * an error, so none needs replacing (which would mangle the texts).
     * A body nested too deeply to parse is no problem document.
     */
    public static function toError(string $method, string $path, Response $response): ApiError
    {
        $mediaType = strtolower(trim(explode(';', $response->header('content-type'), 2)[0]));
        $isJson = $mediaType === 'application/json' || str_ends_with($mediaType, '+json');
        $doc = $isJson ? json_decode($response->body, true) : null;
        $code = $type = $title = $detail = $instance = '';
        $fields = [];
        $str = static fn (mixed $v): string => is_string($v) ? $v : '';
        $isProblem = is_array($doc)
            && (($doc['code'] ?? '') !== '' || ($doc['type'] ?? '') !== '' || ($doc['title'] ?? '') !== '');
        if ($isProblem) {
            $code = $str($doc['code'] ?? null);
            $type = $str($doc['type'] ?? null);
            $title = $str($doc['title'] ?? null);
            $detail = $str($doc['detail'] ?? null);
            $instance = $str($doc['instance'] ?? null);
            foreach (is_array($doc['errors'] ?? null) ? $doc['errors'] : [] as $item) {
                if (is_array($item)) {
                    $fields[] = new FieldError($str($item['field'] ?? null), $str($item['reason'] ?? null));
                }
            }
        } elseif (is_array($doc) && is_string($doc['error'] ?? null)) {
            $code = $doc['error'];
            $detail = $str($doc['error_description'] ?? null);
        } elseif (str_starts_with($mediaType, 'text/') || $isJson) {
            $detail = self::excerpt($response->body, 200);
        }
        $class = $code === ApiError::MFA_REQUIRED ? MfaRequiredError::class : ApiError::class;
        return new $class(
            method: $method,
            path: $path,
            status: $response->status,
            problemCode: $code !== '' ? $code : 'http_' . $response->status,
            type: $type,
            title: $title,
            detail: $detail,
            instance: $instance,
            fieldErrors: $fields,
            retryAfter: self::retryAfter($response->header('retry-after')),
            requestId: $response->header('x-request-id'),
        );
    }

    /** The start of a textual body on one line, at most $max bytes, cut between characters. */
    private static function excerpt(string $body, int $max): string
    {
        $text = preg_replace('/\s+/', ' ', trim($body)) ?? '';
        if (strlen($text) <= $max) {
            return $text;
        }
        $cut = $max;
        while ($cut > 0 && (ord($text[$cut]) & 0xC0) === 0x80) {
            $cut--;
        }
        return substr($text, 0, $cut) . '…';
    }

    /**
     * Reads a Retry-After value: delay seconds or an HTTP date (RFC 9110
     * section 10.2.3). Anything else, or a time in the past, gives null.
     */
    public static function retryAfter(string $value): ?float
    {
        $value = trim($value);
        if ($value === '') {
            return null;
        }
        if (ctype_digit($value)) {
            $seconds = (float) $value;
            return $seconds > 0 ? min($seconds, self::MAX_RETRY_AFTER) : null;
        }
        $when = \DateTimeImmutable::createFromFormat(\DateTimeInterface::RFC7231, $value, new \DateTimeZone('UTC'));
        if ($when === false) {
            return null;
        }
        $delta = (float) $when->format('U.u') - microtime(true);
        return $delta > 0 ? min($delta, self::MAX_RETRY_AFTER) : null;
    }
}
