<?php

// Waits until the fault proxy whose report is at $argv[1] has forwarded two
// event streams whose token it did not refuse (the first ended with its
// token, the second is the reconnection), then posts the message $argv[3] to the conversation
// $argv[2] as the suite's user. EventsTest runs it beside a blocking
// stream, which cannot post while it waits.

declare(strict_types=1);

require __DIR__ . '/../bootstrap.php';

use Acme\Platform\Tests\Support\Env;

[, $reportUrl, $conversationId, $body] = $argv;
while (true) {
    $report = json_decode((string) file_get_contents($reportUrl), true, 512, JSON_THROW_ON_ERROR);
    if (count(array_filter($report['forwarded'], static fn (array $f) => !$f['tokenRefused'])) >= 2) {
        break;
    }
    usleep(50_000);
}
Env::userClient()->postMessage($conversationId, $body);
