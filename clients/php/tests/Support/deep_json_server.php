<?php

// An HTTP server that answers every request with JSON nested 10,000
// levels deep, as a conversations service that stored such a metadata
// before the services limited nesting would: GET …/messages a listing,
// GET …/problem a 400 problem whose field errors are that deep, anything
// else a conversation. It prints "listening HOST:PORT" once it accepts.

declare(strict_types=1);

$server = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
if ($server === false) {
    fwrite(STDERR, "listen: $error\n");
    exit(1);
}
echo 'listening ', stream_socket_get_name($server, false), "\n";
fflush(STDOUT);

$deep = str_repeat('{"a":', 10000) . '1' . str_repeat('}', 10000);
while (true) {
    $conn = @stream_socket_accept($server, -1);
    if ($conn === false) {
        continue;
    }
    $head = '';
    while (!str_contains($head, "\r\n\r\n") && ($line = fgets($conn)) !== false) {
        $head .= $line;
    }
    $path = explode(' ', $head)[1] ?? '/';
    [$status, $type, $body] = match (true) {
        str_ends_with($path, '/messages') => ['200 OK', 'application/json', '[{"id":"msg_1","metadata":' . $deep . '}]'],
        str_ends_with($path, '/problem') => [
            '400 Bad Request', 'application/problem+json', '{"code":"validation_failed","errors":[' . $deep . ']}',
        ],
        default => ['200 OK', 'application/json', '{"id":"cnv_1","metadata":' . $deep . '}'],
    };
    fwrite($conn, "HTTP/1.1 $status\r\nContent-Type: $type\r\nContent-Length: " . strlen($body)
        . "\r\nConnection: close\r\n\r\n" . $body);
    fclose($conn);
}
