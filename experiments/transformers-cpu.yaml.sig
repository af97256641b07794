{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJjM2NkMDczZWIwODRjNWVlZTIyY2NhNTU5MWU0ZmQxZmFiYzFkYTM0ZmYzMjZlMzQwY2Q4MDg4YmVhOTk4YWMyIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtY3B1LnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "Yehu4Surg0ZWtdFKwcMJNYZNvTY3wFkHwDRSCesvhc4jUSoYnLNUJMLKPQ2l4G7JPHL/UAadygVtVjEmkPBZDg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
