{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI0MzIzYmQxZjQ4NmRkNjU4MDUzZDM2NzA4OTY5OGU2YmY5M2QxZWE4OTA4ZWRiNGQ2NjFlODRkZDEyMmNiZjJjIn0sIm5hbWUiOiJkZW1vLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "L61+Hji8pS0M/hl1BsC1yTzazVPdD9gSnsKsV1Mbk67f9jD/arz9aifh1hoK35vHAf6bfjBVZKUW0cIPzbvuCA==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
