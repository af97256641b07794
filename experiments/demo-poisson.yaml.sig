{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJiNTFlMDYxYmUxNTI4YjQxMzhhNzg0YjE3ZmI5NjA3ODcwYTViNzMxMTY0ZDA1NGFhYmVjYzcwNjgxZjM1Nzk0In0sIm5hbWUiOiJkZW1vLXBvaXNzb24ueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "EWsEJ3v2LlfonA1xzjE+wR+cd2Al97YOhAV4PZTyyfAgP7w7m3x6hNQx2KfzajjBWyKXsFJX0cBZmqH4FMQBCw==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
