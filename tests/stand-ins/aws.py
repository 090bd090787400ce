"""A local stand-in for AWS Lambda's Invoke API and STS AssumeRole, for
Strait's aws-lambda tests. It checks every request's Signature Version 4
with botocore's own signer (the official algorithm, from PyPI) before
answering, and answers in the services' published formats.

Usage: python aws.py PORT   (prints "ready" once listening)

Functions, by name:
  echo        -> 200, the payload it got, plus the invocation headers it saw
  proxy       -> 200, an API Gateway response (statusCode 201, headers, body)
  bad-proxy   -> 200, a payload that is not an API Gateway response
  unhandled   -> 200 with X-Amz-Function-Error: Unhandled
Requests signed with the wrong key get 403 InvalidSignatureException.
"""

import json
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

KEYS = {
    "AKIDSTRAITTEST": ("strait-test-secret", None),
}
ISSUED = {"ASIATEMPORARY": ("temporary-secret", "temporary-session-token")}


def verify(handler, body, service):
    auth = handler.headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization"
    fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    key, date, region, signed_service, _ = fields["Credential"].split("/")
    if signed_service != service:
        return "signed for service %s" % signed_service
    secret, token = {**KEYS, **ISSUED}.get(key, (None, None))
    if secret is None:
        return "unknown access key %s" % key
    if token is not None and handler.headers.get("x-amz-security-token") != token:
        return "temporary credentials without their session token"
    signed = fields["SignedHeaders"].split(";")
    headers = {name: handler.headers.get(name) for name in signed}
    url = "http://%s%s" % (handler.headers.get("host"), handler.path)
    request = AWSRequest(method=handler.command, url=url, data=body, headers=headers)
    request.context["timestamp"] = handler.headers.get("x-amz-date")
    signer = SigV4Auth(Credentials(key, secret, token), service, region)
    canonical = signer.canonical_request(request)
    string_to_sign = signer.string_to_sign(request, canonical)
    expected = signer.signature(string_to_sign, request)
    if expected != fields["Signature"]:
        return "signature mismatch; botocore's canonical request was:\n" + canonical
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, headers=None, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path.startswith("/2015-03-31/functions/"):
            return self.invoke(body)
        return self.sts(body)

    def sts(self, body):
        problem = verify(self, body, "sts")
        form = urllib.parse.parse_qs(body.decode())
        if problem or form.get("Action") != ["AssumeRole"]:
            error = "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error></ErrorResponse>"
            return self.answer(403, (error % (problem or "not AssumeRole")).encode(), content_type="text/xml")
        xml = (
            "<AssumeRoleResponse><AssumeRoleResult><Credentials>"
            "<AccessKeyId>ASIATEMPORARY</AccessKeyId><SecretAccessKey>temporary-secret</SecretAccessKey>"
            "<SessionToken>temporary-session-token</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration>"
            "</Credentials><AssumedRoleUser><Arn>%s/%s</Arn></AssumedRoleUser></AssumeRoleResult></AssumeRoleResponse>"
        ) % (form["RoleArn"][0], form["RoleSessionName"][0])
        self.answer(200, xml.encode(), content_type="text/xml")

    def invoke(self, body):
        problem = verify(self, body, "lambda")
        if problem:
            return self.answer(403, {"Message": problem}, {"x-amzn-ErrorType": "InvalidSignatureException"})
        parsed = urllib.parse.urlparse(self.path)
        name = urllib.parse.unquote(parsed.path.split("/")[3])
        seen = {
            "function": name,
            "qualifier": urllib.parse.parse_qs(parsed.query).get("Qualifier", [None])[0],
            "invocation_type": self.headers.get("x-amz-invocation-type"),
            "log_type": self.headers.get("x-amz-log-type"),
            "access_key": self.headers.get("authorization").split("Credential=")[1].split("/")[0],
            "payload": json.loads(body or b"null"),
        }
        base = {"X-Amz-Executed-Version": "$LATEST", "x-amzn-RequestId": "req-1"}
        if name.endswith("echo"):
            return self.answer(200, seen, base)
        if name == "proxy":
            response = {"statusCode": 201, "headers": {"x-from-function": "yes", "content-type": "text/plain"},
                        "multiValueHeaders": {"x-multi": ["a", "b"]}, "body": "created by the function",
                        "isBase64Encoded": False}
            return self.answer(200, response, base)
        if name == "bad-proxy":
            return self.answer(200, b"this is not json", base)
        if name == "unhandled":
            return self.answer(200, {"errorMessage": "boom", "errorType": "Error"},
                               {**base, "X-Amz-Function-Error": "Unhandled"})
        return self.answer(404, {"Message": "Function not found: %s" % name},
                           {"x-amzn-ErrorType": "ResourceNotFoundException"})


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
