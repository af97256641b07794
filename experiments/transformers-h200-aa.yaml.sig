{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI0YWI5NDA4MGUzZWVjNTU1ZDc1NDFhNDhiOTI1OWMxN2E4OTk1OWI1OWJmMmUwNzA4NTYyZmEyOGFjNTZmYTZiIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1hYS55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "pWZ5dCpcLH3xmW5XmDuG0hMGqC+VS7qUZrN+jxxx8cP+1Gw2lfyiLcBmOsK9nHgVdXXQI6ykTeahTSgYXkdrAQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
