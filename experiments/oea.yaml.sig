{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI2ZGU3ZDU2YjY3MDlhYjc1NThjNTM4ZWQ2ZDkwNTc0MDc0NWMxYzZmMmUxYTA4NjBmOWRkYTIxZDYxMTI2Y2NhIn0sIm5hbWUiOiJvZWEueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "n1Rub2zrfODST35n4rvHqraacwWrdcDviQmh/qh/vhU3HwuR6sB9DerlE9k9fJMsbnz5VMYcpOqks6xVdJ+fBg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
