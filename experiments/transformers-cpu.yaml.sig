{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJlYjM3ZjVkYjEzYmVmMjcwMTRhYzc5OGQ1YzUzMTRkMGQwMTE1ZDgxMWY0YTJhMmIwMTZmYWVlOGY2ZTM3NjcyIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtY3B1LnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "TCHTgVS4I7j/6TCuY1FRi90w4DYheYu2I8HoCnxLTlMz65cVhmIqy+vJoXhxdTQ2LVXd88WZNZPeKZ3LawxKDw==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
